//! Where a bus lives when `$SNAPBUS_RUNTIME_DIR` and `$XDG_RUNTIME_DIR` are unset: another
//! user who pre-creates `/tmp/snapbus-<uid>` (or a directory there open to others) does not stop
//! `snapbus up`; it says so and uses `$HOME/.snapbus/run`, where a producer and a consumer find
//! the bus too.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::PathBuf;
use std::process::Command;

use crate::bus::Bg;
use crate::util::{Output, run_cmd, snapbus, unique_bus};

/// A private `$TMPDIR` and `$HOME` for one bus, and the bus; `down` and removed on drop.
struct Place {
    base: PathBuf,
    tmp: PathBuf,
    home: PathBuf,
    bus: String,
}

impl Place {
    fn new(tag: &str) -> Place {
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("rd-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (tmp, home) = (base.join("tmp"), base.join("home"));
        for d in [&tmp, &home] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(d)
                .expect("test dirs");
        }
        // Like /tmp: everyone may create entries.
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        Place {
            base,
            tmp,
            home,
            bus: unique_bus(),
        }
    }

    /// `/tmp/snapbus-<uid>` of this place.
    fn squat_path(&self) -> PathBuf {
        let uid = rustix::process::getuid().as_raw();
        self.tmp.join(format!("snapbus-{uid}"))
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = snapbus();
        c.env_remove("SNAPBUS_RUNTIME_DIR")
            .env_remove("XDG_RUNTIME_DIR")
            .env("TMPDIR", &self.tmp)
            .env("HOME", &self.home)
            .env("SNAPBUS_BUS", &self.bus)
            .args(args);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        run_cmd(&mut self.cmd(args))
    }

    /// `up`, then a producer (the demo, which would start a bus of its own where it looks if it
    /// found none) and a consumer started after it (`echo --from oldest`) meet on the bus in
    /// `expect_root`.
    fn up_and_meet(&self, expect_root: &std::path::Path) -> Output {
        let up = self.run(&["up"]);
        assert!(up.status.success(), "up: {}", up.stderr);
        let sock = expect_root.join(&self.bus).join("broker.sock");
        assert!(sock.exists(), "no {}: {}", sock.display(), up.stderr);
        let demo = self.run(&[
            "demo",
            "--no-echo",
            "--episodes",
            "1",
            "--steps",
            "3",
            "--rate",
            "0",
        ]);
        assert!(demo.status.success(), "demo: {}", demo.stderr);
        assert!(
            !demo.stderr.contains("is up"),
            "the demo started a bus of its own: {}",
            demo.stderr
        );
        let mut echo = Bg::spawn(
            "echo",
            self.cmd(&["echo", "--from", "oldest", "--count", "3", "demo.step"]),
        );
        let lines = echo.json_lines(3);
        assert_eq!(lines.len(), 3);
        let (status, _) = echo.wait();
        assert!(status.success(), "{}", echo.log());
        up
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let _ = self.run(&["down"]);
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

#[test]
fn nobody_squatting_the_bus_lives_in_tmp() {
    let place = Place::new("free");
    place.up_and_meet(&place.squat_path());
    let mode = std::fs::metadata(place.squat_path())
        .expect("created")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
}

#[test]
fn a_squatted_or_open_tmp_dir_is_passed_over_for_home() {
    let cases: [(&str, u32, Option<u32>, &str); 3] = [
        ("other-user", 0o700, Some(65534), "owned by uid 65534"),
        ("mode-755", 0o755, None, "mode 755"),
        ("mode-777", 0o777, None, "mode 777"),
    ];
    for (tag, mode, owner, why) in cases {
        let place = Place::new(tag);
        let squat = place.squat_path();
        std::fs::create_dir(&squat).expect("squat");
        std::fs::set_permissions(&squat, std::fs::Permissions::from_mode(mode)).expect("chmod");
        if let Some(uid) = owner {
            std::os::unix::fs::chown(&squat, Some(uid), Some(uid)).expect("chown (needs root)");
        }
        let home_root = place.home.join(".snapbus/run");
        let up = place.up_and_meet(&home_root);
        assert!(
            up.stderr
                .contains(&format!("using {}", home_root.display()))
                && up.stderr.contains(&squat.display().to_string())
                && up.stderr.contains(why),
            "{tag}: {}",
            up.stderr
        );
        for d in [place.home.join(".snapbus"), home_root.clone()] {
            let m = std::fs::metadata(&d).expect("created").permissions().mode();
            assert_eq!(m & 0o777, 0o700, "{}", d.display());
        }
        // The squatter gives up: the bus is still found where it is.
        std::fs::remove_dir(&squat).expect("unsquat");
        let ls = place.run(&["ls"]);
        assert!(ls.status.success(), "{tag}: ls: {}", ls.stderr);
    }
}
