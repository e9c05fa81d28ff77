//! The Foxglove bridge against a live bus, read by a WebSocket client speaking the protocol by
//! hand: a late client gets every channel advertised and each channel's history; images in
//! lists and dicts of structs and (N, 3) points have channels of their own, a 1-D tensor none;
//! bad requests get a status, a wrong token no connection.

use std::net::TcpStream;

use data_encoding::BASE64;
use serde_json::{Value as Json, json};
use snapbus_bus::Level;
use snapbus_bus::lane::StartAt;
use snapbus_consumers::foxglove::{Bridge, BridgeOptions, SUBPROTOCOL, serve};
use snapbus_consumers::{RunOptions, run};
use tungstenite::client::IntoClientRequest;
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

use crate::common::sensors;
use crate::runtime::Bus;

type Ws = WebSocket<MaybeTlsStream<TcpStream>>;

fn connect(url: &str) -> tungstenite::Result<Ws> {
    let mut req = url.into_client_request()?;
    req.headers_mut().insert(
        "sec-websocket-protocol",
        SUBPROTOCOL.parse().expect("header"),
    );
    let (ws, resp) = tungstenite::connect(req)?;
    assert_eq!(
        resp.headers()
            .get("sec-websocket-protocol")
            .map(|v| v.to_str().unwrap_or_default()),
        Some(SUBPROTOCOL)
    );
    Ok(ws)
}

/// The next text message, as JSON.
fn next_json(ws: &mut Ws) -> Json {
    loop {
        match ws.read().expect("read") {
            Message::Text(t) => return serde_json::from_str(&t).expect("JSON"),
            Message::Binary(b) => panic!("unexpected binary message of {} bytes", b.len()),
            _ => {}
        }
    }
}

/// The next `MESSAGE_DATA`: (subscription, time, JSON).
fn next_data(ws: &mut Ws) -> (u32, u64, Json) {
    loop {
        if let Message::Binary(b) = ws.read().expect("read") {
            assert_eq!(b[0], 1, "opcode MESSAGE_DATA");
            let sub = u32::from_le_bytes(b[1..5].try_into().expect("4 bytes"));
            let t = u64::from_le_bytes(b[5..13].try_into().expect("8 bytes"));
            return (sub, t, serde_json::from_slice(&b[13..]).expect("JSON"));
        }
    }
}

#[test]
fn a_late_client_gets_every_view_and_the_history() {
    let bus = Bus::start("foxglove-views");
    let p = bus.publisher();
    for i in 0..3 {
        p.emit(Level::INFO, 0, &sensors(i)).expect("emit");
    }
    p.close();
    let mut bridge = Bridge::new(&BridgeOptions::default());
    let server = serve(bridge.hub(), 0).expect("serve");
    let mut opts = RunOptions::new("foxglove");
    (opts.subscribe.start, opts.until_end, opts.handle_signals) = (StartAt::Oldest, true, false);
    let summary = run(bus.dir(), &opts, &mut bridge, None).expect("run");
    assert_eq!(summary.delivered, 3);

    // Another user of the machine (no token) is refused.
    let bare = format!("ws://{}/", server.addr());
    assert!(connect(&bare).is_err());

    let mut ws = connect(&server.url()).expect("connect");
    assert_eq!(next_json(&mut ws)["op"], "serverInfo");
    let adv = next_json(&mut ws);
    assert_eq!(adv["op"], "advertise");
    let channels = adv["channels"].as_array().expect("channels");
    let by_topic = |topic: &str| {
        channels
            .iter()
            .find(|c| c["topic"] == topic)
            .unwrap_or_else(|| panic!("no {topic}: {adv}"))
    };
    let mut topics: Vec<&str> = channels
        .iter()
        .filter_map(|c| c["topic"].as_str())
        .collect();
    topics.sort_unstable();
    assert_eq!(
        topics,
        [
            "/plot/sensors",
            "/plot/sensors/by_name/wrist/rgba",
            "/plot/sensors/cloud",
            "/plot/sensors/sensors/0/rgba",
            "/plot/sensors/sensors/1/rgba",
        ],
        "a 1-D tensor (profile) is a field of the record, not a channel"
    );
    for c in channels {
        assert_eq!(
            (&c["encoding"], &c["schemaEncoding"]),
            (&json!("json"), &json!("jsonschema"))
        );
        let schema: Json =
            serde_json::from_str(c["schema"].as_str().expect("schema")).expect("JSON");
        assert_eq!(schema["type"], "object", "{c}");
    }
    assert_eq!(
        by_topic("/plot/sensors/cloud")["schemaName"],
        "foxglove.PointCloud"
    );
    let wrist = by_topic("/plot/sensors/by_name/wrist/rgba");
    assert_eq!(wrist["schemaName"], "foxglove.RawImage");

    // Subscribing: the three records' messages held for a late client, oldest first.
    let sub = json!({"op": "subscribe", "subscriptions": [
        {"id": 7, "channelId": wrist["id"]},
        {"id": 8, "channelId": by_topic("/plot/sensors/cloud")["id"]},
        {"id": 9, "channelId": by_topic("/plot/sensors")["id"]},
    ]});
    ws.send(Message::text(sub.to_string())).expect("send");
    let mut times = Vec::new();
    for i in 0..3u8 {
        let (s, t, m) = next_data(&mut ws);
        assert_eq!(s, 7);
        assert_eq!(
            (&m["encoding"], &m["width"], &m["height"]),
            (&json!("rgba8"), &json!(3), &json!(2))
        );
        let data = BASE64
            .decode(m["data"].as_str().expect("b64").as_bytes())
            .expect("b64");
        assert_eq!(data, vec![30 + i; 24]);
        times.push(t);
    }
    for i in 0..3u8 {
        let (s, t, m) = next_data(&mut ws);
        assert_eq!((s, t), (8, times[usize::from(i)]));
        assert_eq!(m["point_stride"], 12);
        let data = BASE64
            .decode(m["data"].as_str().expect("b64").as_bytes())
            .expect("b64");
        let xyz: Vec<f32> = data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        let want: Vec<f32> = (0..4)
            .flat_map(|k| [k as f32, 2.0 * k as f32, -(k as f32)].map(|v| v + f32::from(i)))
            .collect();
        assert_eq!(xyz, want);
    }
    for i in 0..3u8 {
        let (s, _, m) = next_data(&mut ws);
        assert_eq!(s, 9);
        let profile: Vec<f64> = (0..5).map(|k| f64::from(k * u32::from(i))).collect();
        assert_eq!(m["profile"]["data"], json!(profile));
        assert_eq!(m["sensors"][1]["depth"], 2.0);
    }

    // A request it does not serve: a status message, and the connection stays.
    ws.send(Message::text(
        r#"{"op":"getParameters","parameterNames":[]}"#,
    ))
    .expect("send");
    let status = next_json(&mut ws);
    assert_eq!(
        (&status["op"], &status["level"]),
        (&json!("status"), &json!(1)),
        "{status}"
    );
    ws.send(Message::text(
        r#"{"op":"unsubscribe","subscriptionIds":[7,8,9]}"#,
    ))
    .expect("send");
    ws.close(None).expect("close");
}
