//! Levels and level filters.

use snapbus::{Level, LevelFilter};

#[test]
fn levels_are_ordered_by_severity_and_round_trip_as_bytes() {
    let all = [
        Level::TRACE,
        Level::DEBUG,
        Level::INFO,
        Level::WARN,
        Level::ERROR,
    ];
    for w in all.windows(2) {
        assert!(w[0] < w[1]);
    }
    for (i, l) in all.iter().enumerate() {
        assert_eq!(l.as_u8() as usize, i);
        assert_eq!(Level::from_u8(l.as_u8()), Some(*l));
        assert_eq!(l.to_string().parse::<Level>(), Ok(*l));
        assert_eq!(l.to_string().to_lowercase().parse::<Level>(), Ok(*l));
    }
    assert_eq!(Level::from_u8(5), None);
    assert!("loud".parse::<Level>().is_err());
}

#[test]
fn a_filter_enables_its_level_and_everything_more_severe() {
    let all = [
        Level::TRACE,
        Level::DEBUG,
        Level::INFO,
        Level::WARN,
        Level::ERROR,
    ];
    for (i, f) in [
        LevelFilter::TRACE,
        LevelFilter::DEBUG,
        LevelFilter::INFO,
        LevelFilter::WARN,
        LevelFilter::ERROR,
    ]
    .into_iter()
    .enumerate()
    {
        for (j, l) in all.iter().enumerate() {
            assert_eq!(f.enabled(*l), j >= i, "{f} {l}");
        }
        assert_eq!(f.to_string().parse::<LevelFilter>(), Ok(f));
    }
    assert!(all.iter().all(|l| !LevelFilter::OFF.enabled(*l)));
    assert_eq!("OFF".parse::<LevelFilter>(), Ok(LevelFilter::OFF));
}
