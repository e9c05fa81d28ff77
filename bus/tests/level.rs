//! Levels and level filters.

use snapbus_bus::{Level, LevelFilter};

const ALL: [Level; 5] = [
    Level::TRACE,
    Level::DEBUG,
    Level::INFO,
    Level::WARN,
    Level::ERROR,
];

const FILTERS: [LevelFilter; 5] = [
    LevelFilter::TRACE,
    LevelFilter::DEBUG,
    LevelFilter::INFO,
    LevelFilter::WARN,
    LevelFilter::ERROR,
];

#[test]
fn levels_are_ordered_by_severity_and_stored_as_0_to_4() {
    for w in ALL.windows(2) {
        assert!(w[0] < w[1]);
    }
    for (i, l) in ALL.iter().enumerate() {
        assert_eq!(usize::from(l.as_u8()), i);
        assert_eq!(Level::from_u8(l.as_u8()), Some(*l));
    }
    assert!((5..=u8::MAX).all(|b| Level::from_u8(b).is_none()));
}

#[test]
fn level_names_display_upper_case_and_parse_in_any_case() {
    let names = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"];
    for (l, name) in ALL.iter().zip(names) {
        assert_eq!(l.to_string(), name);
        assert_eq!(name.parse::<Level>(), Ok(*l));
        assert_eq!(name.to_lowercase().parse::<Level>(), Ok(*l));
    }
    assert_eq!("Info".parse::<Level>(), Ok(Level::INFO));
    assert_eq!("wArNiNg".parse::<Level>(), Ok(Level::WARN));
    for bad in ["loud", "", "off", "info2"] {
        let err = bad.parse::<Level>().expect_err(bad);
        assert!(
            err.to_string().contains(&format!("unknown level {bad:?}")),
            "{err}"
        );
    }
}

#[test]
fn a_filter_enables_its_level_and_everything_more_severe() {
    for (i, f) in FILTERS.into_iter().enumerate() {
        for (j, l) in ALL.iter().enumerate() {
            assert_eq!(f.enabled(*l), j >= i, "{f} {l}");
        }
        assert_eq!(f, LevelFilter::from(ALL[i]));
        assert_eq!(f.min_level(), Some(ALL[i]));
    }
    assert!(ALL.iter().all(|l| !LevelFilter::OFF.enabled(*l)));
    assert_eq!(LevelFilter::OFF.min_level(), None);
}

#[test]
fn level_filters_display_lower_case_and_parse_names_and_off() {
    let names = ["trace", "debug", "info", "warn", "error"];
    for (f, name) in FILTERS.into_iter().zip(names) {
        assert_eq!(f.to_string(), name);
        assert_eq!(name.parse::<LevelFilter>(), Ok(f));
        assert_eq!(name.to_uppercase().parse::<LevelFilter>(), Ok(f));
    }
    assert_eq!(LevelFilter::OFF.to_string(), "off");
    for off in ["off", "OFF", "Off"] {
        assert_eq!(off.parse::<LevelFilter>(), Ok(LevelFilter::OFF));
    }
    assert!("none".parse::<LevelFilter>().is_err());
}

#[test]
fn most_verbose_picks_the_filter_enabling_more() {
    assert_eq!(
        LevelFilter::WARN.most_verbose(LevelFilter::DEBUG),
        LevelFilter::DEBUG
    );
    assert_eq!(
        LevelFilter::OFF.most_verbose(LevelFilter::ERROR),
        LevelFilter::ERROR
    );
    assert_eq!(
        LevelFilter::OFF.most_verbose(LevelFilter::OFF),
        LevelFilter::OFF
    );
}
