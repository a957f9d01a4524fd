//! What audio devices exist and what they support, for `audio devices` and for error
//! messages that name the inputs a misspelt `audio.input` could have meant.

use std::collections::BTreeSet;

use cpal::traits::{DeviceTrait, HostTrait};

use super::capture::device_id;

/// One device as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    /// The name `audio.input` / `audio.output` take (the ALSA PCM id).
    pub id: String,
    /// The human description.
    pub description: String,
    /// Whether this is the host's default input.
    pub default_input: bool,
    /// Whether this is the host's default output.
    pub default_output: bool,
    /// Supported input formats, or why they could not be read; `None` if not an input.
    pub input: Option<Result<Vec<FormatRange>, String>>,
    /// Supported output formats, or why they could not be read; `None` if not an output.
    pub output: Option<Result<Vec<FormatRange>, String>>,
}

/// Formats a device supports over one rate range.
#[derive(Debug, Clone, PartialEq)]
pub struct FormatRange {
    /// Lowest and highest sample rate, Hz.
    pub rates: (u32, u32),
    /// Channel counts.
    pub channels: Vec<u16>,
    /// Sample formats (`i16`, `f32`...).
    pub formats: Vec<String>,
}

/// Every device the host lists, inputs and outputs, with what they support.
pub fn list() -> Result<Vec<DeviceInfo>, String> {
    let host = cpal::default_host();
    let default_in = host.default_input_device();
    let default_out = host.default_output_device();
    let mut devices: Vec<cpal::Device> = host
        .devices()
        .map_err(|e| format!("cannot list audio devices: {e}"))?
        .collect();
    // ALSA's `default` is not among the hints; list it first when the host has it.
    for default in [&default_out, &default_in].into_iter().flatten() {
        if !devices.contains(default) {
            devices.insert(0, default.clone());
        }
    }
    let default_in = default_in.map(|d| device_id(&d));
    let default_out = default_out.map(|d| device_id(&d));
    let mut out = Vec::new();
    for device in devices {
        let id = device_id(&device);
        let description = device
            .description()
            .map(|d| d.name().to_string())
            .unwrap_or_default();
        // ALSA's `default` says neither input nor output until opened: ask it both.
        let is_default = default_in.as_deref() == Some(id.as_str())
            || default_out.as_deref() == Some(id.as_str());
        let input = (is_default || device.supports_input()).then(|| {
            device
                .supported_input_configs()
                .map(|c| summarise(c.collect()))
                .map_err(|e| e.to_string())
        });
        let output = (is_default || device.supports_output()).then(|| {
            device
                .supported_output_configs()
                .map(|c| summarise(c.collect()))
                .map_err(|e| e.to_string())
        });
        out.push(DeviceInfo {
            default_input: default_in.as_deref() == Some(id.as_str()),
            default_output: default_out.as_deref() == Some(id.as_str()),
            id,
            description,
            input,
            output,
        });
    }
    Ok(out)
}

/// cpal lists one range per (format, channels, rates); people want one line per rate range.
fn summarise(configs: Vec<cpal::SupportedStreamConfigRange>) -> Vec<FormatRange> {
    let mut rates: Vec<(u32, u32)> = configs
        .iter()
        .map(|c| (c.min_sample_rate(), c.max_sample_rate()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    rates.sort_unstable();
    rates
        .into_iter()
        .map(|r| {
            let matching = configs
                .iter()
                .filter(|c| (c.min_sample_rate(), c.max_sample_rate()) == r);
            let channels: BTreeSet<u16> = matching.clone().map(|c| c.channels()).collect();
            let mut formats: Vec<String> = Vec::new();
            for c in matching {
                let f = c.sample_format().to_string();
                if !formats.contains(&f) {
                    formats.push(f);
                }
            }
            FormatRange {
                rates: r,
                channels: channels.into_iter().collect(),
                formats,
            }
        })
        .collect()
}

/// The listing as text: inputs, then outputs, defaults marked with `*`.
pub fn render(devices: &[DeviceInfo]) -> String {
    let mut out = String::new();
    for (title, pick) in [("inputs", true), ("outputs", false)] {
        out.push_str(&format!("{title}:\n"));
        let mut any = false;
        for d in devices {
            let (formats, default) = if pick {
                (&d.input, d.default_input)
            } else {
                (&d.output, d.default_output)
            };
            let Some(formats) = formats else { continue };
            any = true;
            let mark = if default { "*" } else { " " };
            out.push_str(&format!("{mark} {}  {}\n", d.id, d.description));
            match formats {
                Ok(ranges) if ranges.is_empty() => out.push_str("      no formats reported\n"),
                Ok(ranges) => {
                    for r in ranges {
                        let rates = if r.rates.0 == r.rates.1 {
                            format!("{} Hz", r.rates.0)
                        } else {
                            format!("{}-{} Hz", r.rates.0, r.rates.1)
                        };
                        out.push_str(&format!(
                            "      {rates}, channels {}, formats {}\n",
                            channel_text(&r.channels),
                            r.formats.join(" ")
                        ));
                    }
                }
                Err(e) => out.push_str(&format!("      cannot be opened: {e}\n")),
            }
        }
        if !any {
            out.push_str("  (none)\n");
        }
    }
    out.push_str("* = default\n");
    out
}

/// `1-8` for a contiguous run, else `1 2 6`.
fn channel_text(channels: &[u16]) -> String {
    match (channels.first(), channels.last()) {
        (Some(&a), Some(&b)) if a != b && usize::from(b - a) + 1 == channels.len() => {
            format!("{a}-{b}")
        }
        _ => channels
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(" "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendering_marks_defaults_and_compacts_channels() {
        let dev = DeviceInfo {
            id: "mic".into(),
            description: "USB mic".into(),
            default_input: true,
            default_output: false,
            input: Some(Ok(vec![FormatRange {
                rates: (8000, 48000),
                channels: vec![1, 2],
                formats: vec!["i16".into(), "f32".into()],
            }])),
            output: None,
        };
        let text = render(&[dev]);
        assert!(text.contains("* mic  USB mic"), "{text}");
        assert!(
            text.contains("8000-48000 Hz, channels 1-2, formats i16 f32"),
            "{text}"
        );
        assert!(text.contains("outputs:\n  (none)"), "{text}");
        assert_eq!(channel_text(&[1, 2, 6]), "1 2 6");
    }
}
