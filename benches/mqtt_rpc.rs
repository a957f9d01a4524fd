//! Remote skill call round trip through a real mosquitto on loopback, next to a bare
//! MQTT v5 request/response between two rumqttc clients in the same run.
//!
//! `cargo bench --bench mqtt_rpc` (needs `mosquitto` installed). A custom harness
//! rather than criterion: the figures that matter are percentiles over a fixed number
//! of calls (10,000), which criterion does not report.

#[path = "../tests/support/mod.rs"]
#[allow(dead_code, reason = "a benchmark uses a few of the test helpers")]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, PublishProperties};
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use serde_json::Value;
use strawberry_spoke::app::Parts;
use strawberry_spoke::config::Config;
use strawberry_spoke::daemon::Spoke;
use strawberry_spoke::mqtt::Role;
use strawberry_spoke::skills::policy::NeverConfirm;
use tokio_util::sync::CancellationToken;

use support::mosquitto;

const CALLS: usize = 10_000;
const WARMUP: usize = 500;
/// Under `cargo test --all-targets` (no `--bench` argument) a short smoke run only.
const SMOKE_CALLS: usize = 100;

const SKILL: &str = r#"//! Echo.
//!
//! @class EchoSkill

/// Returns its argument.
///
/// @param x: int  Anything.
/// @return int  The same.
/// @remote
fn echo(x) {
    x
}
"#;

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    (at(0.5), at(0.99), *samples.last().unwrap())
}

fn options(id: &str, port: u16) -> MqttOptions {
    let mut options = MqttOptions::new(id, "127.0.0.1", port);
    let mut network = rumqttc::NetworkOptions::new();
    network.set_tcp_nodelay(true);
    options.set_network_options(network);
    options
}

/// Two plain rumqttc clients: QoS 1 request with response topic and correlation data,
/// answered by echoing the payload, as the spoke protocol does.
async fn bare(port: u16, calls: usize, warmup: usize) -> Vec<Duration> {
    let (responder, mut responder_loop) = AsyncClient::new(options("bench-responder", port), 1024);
    let (requester, mut requester_loop) = AsyncClient::new(options("bench-requester", port), 1024);
    responder
        .subscribe("bench/req", QoS::AtLeastOnce)
        .await
        .unwrap();
    requester
        .subscribe("bench/reply", QoS::AtLeastOnce)
        .await
        .unwrap();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let r2 = responder.clone();
    tokio::spawn(async move {
        loop {
            match responder_loop.poll().await {
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    let _ = ready_tx.send(());
                }
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    let props = p.properties.unwrap_or_default();
                    let reply = PublishProperties {
                        correlation_data: props.correlation_data,
                        ..Default::default()
                    };
                    let topic = props.response_topic.unwrap_or_default();
                    let _ = r2
                        .publish_with_properties(topic, QoS::AtLeastOnce, false, p.payload, reply)
                        .await;
                }
                Ok(_) => {}
                Err(e) => panic!("responder: {e}"),
            }
        }
    });
    let (reply_tx, mut reply_rx) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
    let (sub_tx, mut sub_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    tokio::spawn(async move {
        loop {
            match requester_loop.poll().await {
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    let _ = sub_tx.send(());
                }
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    let _ = reply_tx.send(p.payload);
                }
                Ok(_) => {}
                Err(e) => panic!("requester: {e}"),
            }
        }
    });
    ready_rx.recv().await;
    sub_rx.recv().await;
    let mut samples = Vec::with_capacity(calls);
    for i in 0..(warmup + calls) {
        let payload = format!(r#"{{"class":"EchoSkill","function":"echo","args":[{i}]}}"#);
        let props = PublishProperties {
            response_topic: Some("bench/reply".into()),
            correlation_data: Some(Bytes::copy_from_slice(&(i as u64).to_be_bytes())),
            ..Default::default()
        };
        let t = Instant::now();
        requester
            .publish_with_properties("bench/req", QoS::AtLeastOnce, false, payload, props)
            .await
            .unwrap();
        reply_rx.recv().await.unwrap();
        if i >= warmup {
            samples.push(t.elapsed());
        }
    }
    samples
}

fn main() {
    let (calls, warmup) = if std::env::args().any(|a| a == "--bench") {
        (CALLS, WARMUP)
    } else {
        (SMOKE_CALLS, 10)
    };
    let broker = mosquitto::Broker::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("skills")).unwrap();
    std::fs::write(dir.path().join("skills/echo.rhai"), SKILL).unwrap();
    let mut config = Config::default();
    config.skills.dir = dir.path().join("skills");
    config.device.data_dir = dir.path().join("data");
    config.mqtt.broker = broker.url();
    config.mqtt.device_id = "server".into();
    config.device.name = "Server".into();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let spoke = rt.block_on(async {
        let parts = Parts::new(&config).unwrap();
        Spoke::start(&parts, Arc::new(NeverConfirm), CancellationToken::new()).unwrap()
    });
    // Device names are unique on the bus: the caller must not claim the server's.
    config.mqtt.device_id = "client".into();
    config.device.name = "Client".into();
    let link = rt.block_on(async {
        let link = Parts::new(&config)
            .unwrap()
            .link(Role::Caller)
            .unwrap()
            .unwrap();
        assert!(link.wait_ready(Duration::from_secs(5)).await);
        // Wait for the server's registration to be seen.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !link.with_peers(|p| {
            p.all()
                .any(|peer| peer.online && peer.function("EchoSkill", "echo").is_some())
        }) {
            assert!(Instant::now() < deadline, "the server never registered");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        link
    });

    let mut skill = Vec::with_capacity(calls);
    for i in 0..(warmup + calls) {
        let t = Instant::now();
        let v = link
            .call_blocking("server", "server", "EchoSkill", "echo", &[Value::from(i)])
            .unwrap();
        if i >= warmup {
            skill.push(t.elapsed());
        }
        assert_eq!(v, Value::from(i));
    }
    let bare = rt.block_on(bare(broker.port, calls, warmup));
    rt.block_on(async {
        link.shutdown().await;
        spoke.shutdown().await;
    });

    let (s50, s99, smax) = percentiles(skill);
    let (b50, b99, bmax) = percentiles(bare);
    println!("mqtt_rpc: {calls} calls each, QoS 1, mosquitto on loopback, TCP_NODELAY");
    println!(
        "  remote skill call (Link::call_blocking -> serve -> Rhai skill -> answer): p50 {s50:?}  p99 {s99:?}  max {smax:?}"
    );
    println!(
        "  bare rumqttc v5 request/response:                                      p50 {b50:?}  p99 {b99:?}  max {bmax:?}"
    );
    println!(
        "  ratio skill/bare: p50 {:.2}x  p99 {:.2}x",
        s50.as_secs_f64() / b50.as_secs_f64(),
        s99.as_secs_f64() / b99.as_secs_f64()
    );
}
