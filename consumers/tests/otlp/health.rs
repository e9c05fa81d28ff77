//! What `snapbus ls` says of the exporter's receiver, and how soon export resumes after an
//! outage.

use super::*;
use snapbus_consumers::otlp::StatEntry;

/// A wrong endpoint that answers 404 to every batch is `state=error` with the status, not
/// `ok`; the first accepted request brings `ok` back.
#[test]
fn a_receiver_answering_404_is_state_error_with_the_status() {
    let r = Receiver::start();
    r.fallback(Some(Reply::Status(404, None)));
    let (mut x, mut f) = export_to(&r);
    f.notes(&mut x, 3);
    x.flush().expect("flush");
    let s = poll("the refused batch", &x, |s| {
        s.dropped(Signal::Logs, DropReason::Rejected) == 3
    });
    assert_eq!(s.state, ExportState::Error, "{s:?}");
    assert_eq!(s.last_status, 404, "{s:?}");
    assert!(s.last_error.contains("HTTP 404"), "{s:?}");
    let entries = s.entries();
    let text = |k: &str| {
        entries
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(text("state"), Some(StatEntry::Text("error".into())));
    assert_eq!(text("last_status"), Some(StatEntry::Count(404)));
    assert_eq!(s.retries, 0, "a 404 is not retried: {s:?}");
    r.fallback(None);
    f.notes(&mut x, 2);
    x.flush().expect("flush");
    let s = poll("ok again", &x, |s| s.exported(Signal::Logs) == 2);
    assert_eq!(s.state, ExportState::Ok, "{s:?}");
    x.shutdown();
}

/// After an outage long enough for the backoff to have grown (the default policy: 1 s
/// doubling to 30 s), export resumes within 2 s of the receiver's return: a refused
/// connection costs the receiver nothing, so it is retried at least every second.
#[test]
fn export_resumes_within_two_seconds_of_the_receivers_return() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let mut o = OtlpOptions::new(Endpoints::from_base(&url).expect("url"));
    o.interval = Duration::ZERO;
    let mut x = OtlpExporter::start(o).expect("start");
    let mut f = Feed::new();
    f.notes(&mut x, 4);
    x.flush().expect("flush");
    // Five refused attempts: with the exponential backoff alone, the next would come 8-16 s
    // later.
    let s = poll("down", &x, |s| s.retries >= 5);
    assert_eq!(s.state, ExportState::Down, "{s:?}");
    assert_eq!(s.exported(Signal::Logs), 0);
    let back = Instant::now();
    let r = Receiver::on(&format!("127.0.0.1:{port}"));
    r.wait_for("the first accepted request", WAIT, |a| {
        a.iter().any(Arrival::accepted)
    });
    let first = r
        .arrivals()
        .into_iter()
        .find(Arrival::accepted)
        .expect("accepted");
    let took = first.at.saturating_duration_since(back);
    eprintln!("export resumed {took:?} after the receiver came back");
    assert!(
        took <= Duration::from_secs(2),
        "export resumed {took:?} after the receiver came back"
    );
    poll("recovery", &x, |s| s.exported(Signal::Logs) == 4);
    x.shutdown();
}
