//! How the configuration becomes each part's settings: the one place that knows both.
//!
//! A part never reads the configuration: its constructor takes settings of its own (a
//! plain struct in its module, in the units it works in, `Duration` rather than
//! milliseconds), and this file makes them. A section that feeds one part turns into
//! its settings with `settings()` (`config.stt.settings()`); a part that reads several
//! sections gets them from a method of [`Config`] named after it
//! (`config.link_settings()`). [`crate::app::Parts`] calls them when it builds the
//! parts. So the file's layout can change without touching a part, a part can be made
//! in a test without a configuration, and `tests/imports.rs` checks that no part
//! imports `crate::config`.
//!
//! A part's defaults are its own (its settings' `Default`); a section's defaults that
//! mirror them read them from there, so each default is written once.

use std::path::PathBuf;
use std::time::Duration;

use super::{
    AudioConfig, Config, HomeAssistantConfig, HubConfig, McpConfig, MqttConfig, SandboxConfig,
    SttConfig, TtsConfig, VadConfig, WakeConfig,
};
use crate::agent::AgentSettings;
use crate::daemon::voice::VoiceSettings;
use crate::host::HostSettings;
use crate::host::storage::StorageLimits;
use crate::hub::{EndpointSettings, HubSettings, StreamLimits};
use crate::mcp::{McpSettings, TextLimits};
use crate::mqtt::settings::{check_security, device_id, password, tls_config};
use crate::mqtt::{Broker, LinkSettings, MqttError, PeerLimits};
use crate::sandbox::Limits;
use crate::skills::policy::AllowList;
use crate::wake::Settings as WakeSettings;

impl HomeAssistantConfig {
    /// What the host API needs, when a server is configured.
    pub fn settings(&self) -> Option<crate::host::homeassistant::HaSettings> {
        use crate::host::homeassistant::{HaSettings, TokenSource};
        let url = self.url.trim().trim_end_matches('/');
        if url.is_empty() {
            return None;
        }
        let token = match (&self.token_file, &self.token_env) {
            (Some(file), _) => TokenSource::File(file.clone()),
            (None, Some(var)) => TokenSource::Env(var.clone()),
            // Refused by validation; a file that cannot exist keeps the error clear.
            (None, None) => TokenSource::File(PathBuf::new()),
        };
        Some(HaSettings {
            url: url.to_string(),
            token,
            timeout: Duration::from_millis(self.timeout_ms),
            max_response_bytes: self.max_response_bytes,
            max_entities: self.max_entities,
            cache_ttl: Duration::from_millis(self.cache_ms),
        })
    }
}

impl TtsConfig {
    /// What the synthesiser needs.
    pub fn settings(&self) -> crate::tts::TtsSettings {
        crate::tts::TtsSettings {
            engine: self.engine,
            program: self.program.clone(),
            voice: self.voice.clone(),
            voices: self.voices.clone(),
            rate_wpm: self.rate_wpm,
            timeout: Duration::from_millis(self.timeout_ms),
        }
    }
}

impl AudioConfig {
    /// What the capture thread needs.
    pub fn capture_settings(&self) -> crate::audio::CaptureSettings {
        crate::audio::CaptureSettings {
            input: self.input.clone(),
            retry_min: Duration::from_millis(self.retry_min_ms),
            retry_max: Duration::from_millis(self.retry_max_ms),
            stall_timeout: Duration::from_millis(self.stall_timeout_ms),
            rate: (self.input_rate > 0).then_some(self.input_rate),
            channels: (self.input_channels > 0).then_some(self.input_channels),
            format: crate::audio::capture::parse_sample_format(&self.input_format),
        }
    }
}

impl VadConfig {
    /// What the detector needs.
    pub fn settings(&self) -> crate::vad::VadSettings {
        crate::vad::VadSettings {
            hangover_ms: self.hangover_ms,
            mid_sentence_ms: self.mid_sentence_ms,
            max_utterance_ms: self.max_utterance_ms,
            no_speech_timeout_ms: self.no_speech_timeout_ms,
            threshold_db: self.threshold_db,
        }
    }
}

impl SandboxConfig {
    /// The sandbox's limits.
    pub fn settings(&self) -> Limits {
        Limits {
            memory_bytes: self.memory_mib * 1024 * 1024,
            wall_time: Duration::from_millis(self.timeout_ms),
            total_time: Duration::from_millis(self.total_timeout_ms),
            output_bytes: self.output_bytes,
            result_bytes: self.result_bytes,
            max_operations: self.max_operations,
            max_string_size: self.max_string_bytes,
            max_array_size: self.max_array_len,
            max_map_size: self.max_map_len,
            max_call_depth: self.max_call_depth,
            max_expr_depth: self.max_expr_depth,
        }
    }
}

impl SttConfig {
    /// What the transcriber needs.
    pub fn settings(&self) -> crate::stt::Settings {
        crate::stt::Settings {
            model: self.model.clone(),
            threads: self.threads,
            language: self.language.clone(),
            languages: self.languages.clone(),
            timeout: std::time::Duration::from_millis(self.timeout_ms),
            beam_size: self.beam_size,
            timestamps: crate::stt::DEFAULT_TIMESTAMPS,
        }
    }
}

impl WakeConfig {
    /// What the detector needs.
    pub fn settings(&self) -> WakeSettings {
        WakeSettings {
            sensitivity: self.sensitivity,
            threshold: self.threshold,
            avg_threshold: self.avg_threshold,
            min_scores: self.min_scores,
            score_mode: self.score_mode,
            score_ref: self.score_ref,
            band_size: self.band_size,
            vad: self.vad,
            gain_normalizer: self.gain_normalizer,
            eager: self.eager,
        }
    }
}

impl Config {
    /// What skills may do on the host.
    pub fn host_settings(&self) -> HostSettings {
        HostSettings {
            data_dir: self.device.data_dir.clone(),
            call_timeout: Duration::from_millis(self.skills.call_timeout_ms),
            command_timeout: Duration::from_millis(self.skills.command_timeout_ms),
            http_timeout: Duration::from_millis(self.skills.http_timeout_ms),
            http_max_bytes: self.skills.http_max_bytes,
            file_max_bytes: self.skills.file_max_bytes,
            storage: StorageLimits {
                max_bytes: self.skills.storage_max_bytes,
                max_value_bytes: self.skills.storage_max_value_bytes,
            },
            quiet_hours: crate::host::services::QuietHours::parse(&self.announce.quiet_hours),
            homeassistant: self.homeassistant.settings(),
            ..HostSettings::default()
        }
    }
}

impl HubConfig {
    /// What the hub client needs.
    pub fn settings(&self) -> HubSettings {
        HubSettings {
            endpoints: self
                .endpoints
                .iter()
                .map(|e| EndpointSettings {
                    url: e.url.clone(),
                    model: e.model.clone(),
                    api_key_file: e.api_key_file.clone(),
                    api_key_env: e.api_key_env.clone(),
                })
                .collect(),
            connect_timeout: Duration::from_millis(self.connect_timeout_ms),
            first_byte_timeout: Duration::from_millis(self.first_byte_timeout_ms),
            chunk_timeout: Duration::from_millis(self.chunk_timeout_ms),
            retry_after: Duration::from_millis(self.retry_down_after_ms),
            limits: StreamLimits {
                max_reply_bytes: self.max_reply_bytes,
                max_event_bytes: self.max_event_bytes,
                max_tool_calls: self.max_tool_calls,
            },
            max_error_body_bytes: self.max_error_body_bytes,
            allow_insecure: self.allow_insecure,
            max_tokens: self.max_tokens,
            ca_file: self.ca_file.clone(),
        }
    }
}

impl McpConfig {
    /// What the MCP servers need; `None` without a servers file.
    pub fn settings(&self) -> Option<McpSettings> {
        Some(McpSettings {
            file: self.config_file.clone()?,
            start_timeout: Duration::from_millis(self.start_timeout_ms),
            max_result_bytes: self.max_result_bytes,
            limits: TextLimits {
                max_tools: self.max_tools,
                max_text_bytes: self.max_text_bytes,
            },
        })
    }
}

impl MqttConfig {
    /// What other spokes' registrations may hold.
    pub fn peer_limits(&self) -> PeerLimits {
        PeerLimits {
            registration_bytes: self.max_registration_bytes,
            peers: self.max_peers,
            classes: self.max_classes_per_peer,
            functions: self.max_functions_per_peer,
            requests: self.max_requests_per_peer,
            name_bytes: self.max_name_bytes,
            summary_bytes: self.max_summary_bytes,
            text_bytes: self.max_text_bytes,
        }
    }
}

impl Config {
    /// What the MQTT link needs (`[mqtt]`, `device`); `None` in local mode (no broker).
    /// Reads the password and TLS files, creates the device id on first use, and
    /// refuses a broker on another machine without TLS and authentication.
    pub fn link_settings(&self) -> Result<Option<LinkSettings>, MqttError> {
        let mqtt = &self.mqtt;
        if mqtt.broker.trim().is_empty() {
            return Ok(None);
        }
        let broker = Broker::parse(mqtt.broker.trim())?;
        let password = password(&mqtt.password, &mqtt.password_file)?;
        let credentials = (!mqtt.username.is_empty()).then(|| (mqtt.username.clone(), password));
        let has_cert = !mqtt.client_cert.as_os_str().is_empty();
        check_security(
            &broker,
            credentials.is_some() || has_cert,
            mqtt.allow_insecure,
        )?;
        let tls = match broker.tls {
            true => Some(std::sync::Arc::new(tls_config(
                &mqtt.ca_file,
                &mqtt.client_cert,
                &mqtt.client_key,
            )?)),
            false => None,
        };
        Ok(Some(LinkSettings {
            broker,
            device_id: device_id(&mqtt.device_id, &self.device.data_dir)?,
            device_name: self.device.name.clone(),
            credentials,
            tls,
            keep_alive: Duration::from_secs(mqtt.keep_alive_s),
            topics: crate::mqtt::protocol::Topics::new(&mqtt.topic_prefix),
            call_timeout: Duration::from_millis(mqtt.call_timeout_ms),
            allow: AllowList::new(mqtt.remote_allow.clone()),
            max_payload: mqtt.max_payload_bytes,
            max_concurrent: mqtt.max_concurrent_calls,
            peer_limits: mqtt.peer_limits(),
            // The model is loaded once per configuration by `app::Parts`, which sets it.
            search: crate::embed::SearchModel::default(),
        }))
    }

    /// What a turn needs besides its parts (`[agent]`, `device.name`, `hub.mode`).
    pub fn agent_settings(&self) -> AgentSettings {
        AgentSettings {
            device_name: self.device.name.clone(),
            mode: self.hub.mode,
            max_rounds: self.agent.max_rounds,
            prompt_budget_tokens: self.agent.prompt_budget_tokens,
            memory_budget_tokens: self.agent.memory_budget_tokens,
            session_idle: Duration::from_secs(self.agent.session_idle_secs),
        }
    }

    /// How the voice loop behaves around a turn (`wake`, `vad`, `timers`).
    pub fn voice_settings(&self) -> VoiceSettings {
        VoiceSettings {
            interrupt: self.wake.interrupt,
            follow_up_ms: self.vad.follow_up_ms,
            confirm_ms: self.vad.confirm_ms,
            ring_ms: self.timers.ring_ms,
            arbitration_ms: self.wake.arbitration_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_mode_has_no_link_and_a_remote_broker_needs_security() {
        let mut config = Config::default();
        assert!(config.link_settings().unwrap().is_none());
        config.mqtt.broker = "mqtt://hub.example".into();
        config.mqtt.device_id = "kitchen".into();
        let err = config.link_settings().unwrap_err().to_string();
        assert!(err.contains("allow_insecure"), "{err}");
        config.mqtt.allow_insecure = true;
        let link = config.link_settings().unwrap().unwrap();
        assert_eq!(link.device_id, "kitchen");
        assert_eq!(link.peer_limits, PeerLimits::default());
    }

    #[test]
    fn default_sections_give_the_parts_defaults() {
        let config = Config::default();
        assert_eq!(config.hub.settings().limits, StreamLimits::default());
        assert_eq!(config.mqtt.peer_limits(), PeerLimits::default());
        assert!(config.mcp.settings().is_none());
    }
}
