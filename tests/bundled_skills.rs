//! The bundled skills, run for real: real Rhai, the real host API, real /proc, real `df`
//! and `amixer` (or its absence), storage in a temporary data directory.

use jiff::Timestamp;
use jiff::tz::TimeZone;

use crate::support::skill;
use crate::support::skill::{Skill, field, strings};

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temporary directory")
}

/// jiff's answer for `zone` at two instants bracketing a call, so a minute or day
/// boundary during the call cannot make the test flaky.
fn bracket(zone: &str, f: impl Fn(&jiff::Zoned) -> String) -> [String; 2] {
    let tz = TimeZone::get(zone).unwrap();
    [
        f(&Timestamp::now().to_zoned(tz.clone())),
        f(&Timestamp::now().to_zoned(tz)),
    ]
}

#[test]
fn clock_now_in_another_zone_matches_jiff() {
    let dir = tmp();
    let clock = Skill::load("clock.rhai", dir.path());
    for zone in ["Asia/Tokyo", "America/New_York", "Asia/Kolkata", "UTC"] {
        let before = Timestamp::now().to_zoned(TimeZone::get(zone).unwrap());
        let t = clock.ok("now", (zone.to_string(),));
        let after = Timestamp::now().to_zoned(TimeZone::get(zone).unwrap());
        let ok = |expected: [String; 2], got: String| {
            assert!(expected.contains(&got), "{zone}: {got} not in {expected:?}");
        };
        let fmt = |z: &jiff::Zoned, f: &str| z.strftime(f).to_string();
        ok(
            [fmt(&before, "%H:%M"), fmt(&after, "%H:%M")],
            field(&t, "time"),
        );
        ok(
            [fmt(&before, "%A %-d %B %Y"), fmt(&after, "%A %-d %B %Y")],
            field(&t, "date"),
        );
        ok(
            [fmt(&before, "%A"), fmt(&after, "%A")],
            field(&t, "weekday"),
        );
        assert_eq!(field::<String>(&t, "zone"), zone);
        assert_eq!(field::<String>(&t, "utc_offset"), fmt(&before, "%:z"));
        assert_eq!(field::<i64>(&t, "year"), i64::from(before.year()));
    }
    let tokyo = clock.ok("now", ("Asia/Tokyo".to_string(),));
    assert_eq!(field::<String>(&tokyo, "utc_offset"), "+09:00");
}

#[test]
fn clock_local_zone_is_the_system_zone() {
    let dir = tmp();
    let clock = Skill::load("clock.rhai", dir.path());
    let system = TimeZone::system();
    let t = clock.ok("now", (String::new(),));
    assert_eq!(
        field::<String>(&t, "zone"),
        system.iana_name().unwrap_or("local")
    );
    let day = clock.ok("day_of_week", (String::new(),)).to_string();
    let expected = bracket(system.iana_name().unwrap_or("UTC"), |z| {
        z.strftime("%A").to_string()
    });
    assert!(expected.contains(&day), "{day} not in {expected:?}");
}

#[test]
fn clock_unknown_zone_names_it_and_the_fix() {
    let dir = tmp();
    let clock = Skill::load("clock.rhai", dir.path());
    let err = clock.call("now", ("Europe/Pari".to_string(),)).unwrap_err();
    assert!(
        err.contains("unknown time zone `Europe/Pari`; use an IANA name such as Europe/Paris"),
        "{err}"
    );
}

#[test]
fn clock_hours_ahead() {
    let dir = tmp();
    let clock = Skill::load("clock.rhai", dir.path());
    let h = clock.ok(
        "hours_ahead",
        ("Asia/Kolkata".to_string(), "UTC".to_string()),
    );
    assert_eq!(h.as_float().unwrap(), 5.5);
    let h = clock.ok("hours_ahead", ("UTC".to_string(), "Asia/Tokyo".to_string()));
    assert_eq!(h.as_float().unwrap(), -9.0);
}

#[test]
fn clock_until_a_time_today_and_tomorrow() {
    let dir = tmp();
    let clock = Skill::load("clock.rhai", dir.path());
    let utc = TimeZone::UTC;
    let now = Timestamp::now().to_zoned(utc.clone());
    let later = now
        .checked_add(jiff::SignedDuration::from_mins(90))
        .unwrap()
        .strftime("%H:%M")
        .to_string();
    let u = clock.ok("time_until", (later.clone(), "UTC".to_string()));
    // 90 minutes, or 89 if the minute turned between reading the clock here and there.
    let minutes: i64 = field(&u, "minutes");
    assert!((89..=90).contains(&minutes), "{later}: {u}");
    if minutes == 90 {
        assert_eq!(field::<String>(&u, "spoken"), "1 hour and 30 minutes");
        assert_eq!(field::<i64>(&u, "hours"), 1);
        assert_eq!(field::<i64>(&u, "rest_minutes"), 30);
    }
    // Crossing midnight is only "tomorrow" when the target is earlier in the day.
    let crosses_midnight = later < now.strftime("%H:%M").to_string();
    assert_eq!(field::<bool>(&u, "tomorrow"), crosses_midnight);

    let earlier = now
        .checked_sub(jiff::SignedDuration::from_mins(30))
        .unwrap()
        .strftime("%H:%M")
        .to_string();
    let u = clock.ok("time_until", (earlier, "UTC".to_string()));
    let minutes: i64 = field(&u, "minutes");
    assert!((24 * 60 - 31..=24 * 60 - 30).contains(&minutes), "{u}");
}

#[test]
fn clock_until_rejects_bad_times() {
    let dir = tmp();
    let clock = Skill::load("clock.rhai", dir.path());
    for (bad, expected) in [
        ("7pm", "expected a clock time as \"HH:MM\""),
        ("aa:bb", "expected a clock time as \"HH:MM\""),
        ("25:00", "\"25:00\" is not a clock time: hours go 0-23"),
    ] {
        let err = clock
            .call("time_until", (bad.to_string(), "UTC".to_string()))
            .unwrap_err();
        assert!(err.contains(expected), "{bad}: {err}");
    }
}

#[test]
fn notes_add_read_remove_clear() {
    let dir = tmp();
    let notes = Skill::load("notes.rhai", dir.path());
    let add = |item: &str, list: &str| {
        notes
            .ok("add", (item.to_string(), list.to_string()))
            .as_int()
            .unwrap()
    };
    assert_eq!(add("milk", "shopping"), 1);
    assert_eq!(add("  eggs ", "Shopping"), 2);
    assert_eq!(add("oat milk", " SHOPPING"), 3);
    assert_eq!(add("call the plumber", "notes"), 1);
    let read = |list: &str| strings(&notes.ok("read", (list.to_string(),)));
    assert_eq!(read("shopping"), ["milk", "eggs", "oat milk"]);
    assert_eq!(read("unknown"), Vec::<String>::new());

    // An exact match wins over a partial one.
    let removed = notes.ok("remove", ("MILK".to_string(), "shopping".to_string()));
    assert_eq!(removed.to_string(), "milk");
    // Then "milk" only matches "oat milk".
    let removed = notes.ok("remove", ("milk".to_string(), "shopping".to_string()));
    assert_eq!(removed.to_string(), "oat milk");
    let err = notes
        .call("remove", ("bread".to_string(), "shopping".to_string()))
        .unwrap_err();
    assert!(
        err.contains("no item \"bread\" on the shopping list; it has: eggs"),
        "{err}"
    );
    assert!(
        notes
            .call("add", ("   ".to_string(), "shopping".to_string()))
            .unwrap_err()
            .contains("cannot add an empty item")
    );

    let lists = notes.ok("lists", ());
    let lists = lists.into_array().unwrap();
    assert_eq!(lists.len(), 2);
    assert_eq!(field::<String>(&lists[0], "name"), "notes");
    assert_eq!(field::<i64>(&lists[1], "count"), 1);

    assert_eq!(
        notes
            .ok("clear", ("shopping".to_string(),))
            .as_int()
            .unwrap(),
        1
    );
    assert_eq!(read("shopping"), Vec::<String>::new());
    assert_eq!(notes.ok("lists", ()).into_array().unwrap().len(), 1);
}

#[test]
fn notes_ambiguous_removal_asks_which() {
    let dir = tmp();
    let notes = Skill::load("notes.rhai", dir.path());
    for item in ["oat milk", "soy milk"] {
        notes
            .ok("add", (item.to_string(), "shopping".to_string()))
            .as_int()
            .unwrap();
    }
    let err = notes
        .call("remove", ("milk".to_string(), "shopping".to_string()))
        .unwrap_err();
    assert!(
        err.contains("\"milk\" matches several items on the shopping list: oat milk, soy milk"),
        "{err}"
    );
}

#[test]
fn notes_persist_across_restarts() {
    let dir = tmp();
    {
        let notes = Skill::load("notes.rhai", dir.path());
        let n = notes.ok(
            "add",
            ("pack the charger".to_string(), "travel".to_string()),
        );
        assert_eq!(n.as_int(), Ok(1));
    }
    let notes = Skill::load("notes.rhai", dir.path());
    assert_eq!(
        strings(&notes.ok("read", ("travel".to_string(),))),
        ["pack the charger"]
    );
    // The journal's records, one JSON line each, as skills/README.md describes them.
    let file = dir.path().join("skills/NotesSkill.jsonl");
    let text = std::fs::read_to_string(&file).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(
        last,
        serde_json::json!({"k": "list:travel", "v": ["pack the charger"]})
    );
}

#[test]
fn system_values_are_plausible() {
    let dir = tmp();
    let system = Skill::load("system.rhai", dir.path());
    let expected = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(system.ok("hostname", ()).to_string(), expected.trim());

    let up = system.ok("uptime", ());
    let real: f64 = std::fs::read_to_string("/proc/uptime")
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let seconds: i64 = field(&up, "seconds");
    assert!(seconds > 0 && (seconds as f64) <= real + 1.0, "{up}");
    assert_eq!(
        field::<i64>(&up, "days") * 86400
            + field::<i64>(&up, "hours") * 3600
            + field::<i64>(&up, "minutes") * 60,
        seconds / 60 * 60
    );
    assert!(!field::<String>(&up, "spoken").is_empty());

    let load = system.ok("load", ());
    assert!(field::<f64>(&load, "one") >= 0.0);
    assert!(field::<i64>(&load, "cpus") >= 1);

    let mem = system.ok("memory", ());
    let total: i64 = field(&mem, "total_mb");
    let available: i64 = field(&mem, "available_mb");
    assert!(total > 0 && available > 0 && available <= total, "{mem}");
    assert!((0..=100).contains(&field::<i64>(&mem, "percent_used")));

    let disk = system.ok("disk", ("/".to_string(),));
    let total: i64 = field(&disk, "total_mb");
    assert!(total > 0, "{disk}");
    assert!(field::<i64>(&disk, "used_mb") + field::<i64>(&disk, "free_mb") <= total);
    assert_eq!(field::<String>(&disk, "mount"), "/");
    assert!((0..=100).contains(&field::<i64>(&disk, "percent_used")));

    let err = system
        .call("disk", ("/no/such/path".to_string(),))
        .unwrap_err();
    assert!(
        err.contains("cannot get disk usage of /no/such/path: df:"),
        "{err}"
    );

    let summary = system.ok("summary", ()).to_string();
    assert!(
        summary.starts_with(&format!("{} has been up for", expected.trim())),
        "{summary}"
    );
}

#[test]
fn system_cpu_temperature_or_a_clear_message() {
    let dir = tmp();
    let system = Skill::load("system.rhai", dir.path());
    let has_zone = std::fs::read_dir("/sys/class/thermal").is_ok_and(|d| {
        d.flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("thermal_zone"))
    });
    match system.call("cpu_temperature", ()) {
        Ok(t) => {
            assert!(has_zone, "a temperature without a sensor: {t}");
            let t = t.as_float().unwrap();
            assert!((-40.0..130.0).contains(&t), "{t}");
        }
        Err(e) => {
            assert!(!has_zone, "a sensor exists but: {e}");
            assert!(
                e.contains("no CPU temperature sensor on this machine: /sys/class/thermal has no thermal zones"),
                "{e}"
            );
        }
    }
}

#[test]
fn volume_without_a_sound_card_says_so() {
    let dir = tmp();
    let volume = Skill::load("volume.rhai", dir.path());
    let err = volume.call("get", ("Master".to_string(),)).unwrap_err();
    let amixer_installed = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .any(|d| d.join("amixer").is_file());
    if amixer_installed {
        assert!(
            err.contains("no sound card mixer found: amixer: Mixer attach default error"),
            "{err}"
        );
    } else {
        assert!(
            err.contains(
                "command `amixer` not found on PATH; install it (Debian: apt install alsa-utils)"
            ),
            "{err}"
        );
    }
}

#[test]
fn every_bundled_skill_compiles() {
    let dir = tmp();
    let mut files: Vec<_> = std::fs::read_dir(skill::skills_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".rhai"))
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "clock.rhai",
            "homeassistant.rhai",
            "notes.rhai",
            "speaker.rhai",
            "system.rhai",
            "timers.rhai",
            "volume.rhai"
        ]
    );
    for f in files {
        Skill::load(&f, dir.path());
    }
}

#[test]
fn the_readme_example_skill_compiles_with_the_host_api() {
    let readme = std::fs::read_to_string(skill::skills_dir().join("README.md")).unwrap();
    let start = readme
        .find("A complete file")
        .expect("README has the worked example");
    let code = readme[start..]
        .split("```rhai\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("the example is a rhai block");
    assert!(code.contains("@class KettleSkill"));
    let dir = tmp();
    let (engine, _) = skill::engine("KettleSkill", skill::settings(dir.path()));
    let ast = engine
        .compile(code)
        .unwrap_or_else(|e| panic!("README example: {e}"));
    let mut names: Vec<_> = ast.iter_functions().map(|f| f.name.to_string()).collect();
    names.sort();
    assert_eq!(
        names,
        ["_plug", "keep_warm", "status", "switch_off", "switch_on"]
    );
    // Its own range check runs before any network access.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let err = strawberry_spoke::deadline::with_deadline(until, || {
        engine
            .call_fn::<rhai::Dynamic>(&mut rhai::Scope::new(), &ast, "keep_warm", (99_i64, true))
            .unwrap_err()
            .to_string()
    });
    assert!(
        err.contains("keep_warm takes 1 to 30 minutes, got 99"),
        "{err}"
    );
}

#[test]
fn timers_are_set_listed_extended_and_cancelled_by_name() {
    let dir = tmp();
    let timers = Skill::load("timers.rhai", dir.path());
    let pasta = timers.ok(
        "start",
        ("8 minutes".to_string(), "Pasta timer".to_string()),
    );
    assert_eq!(field::<String>(&pasta, "name"), "pasta");
    assert_eq!(field::<String>(&pasta, "spoken"), "8 minutes");
    let plain = timers.ok("start", (90_i64,));
    assert_eq!(field::<String>(&plain, "name"), "timer");
    assert_eq!(field::<String>(&plain, "spoken"), "1 minute 30 seconds");
    let error = timers
        .call("start", ("5 minutes".to_string(), "pasta".to_string()))
        .unwrap_err();
    assert!(
        error.contains("already a timer called \"pasta\""),
        "{error}"
    );
    let error = timers.call("start", ("soon".to_string(),)).unwrap_err();
    assert!(error.contains("\"10 minutes\""), "{error}");
    // Hours ahead whenever the test runs, so it is listed after the two timers.
    let alarm = format!("{:02}:30", (jiff::Zoned::now().hour() + 3) % 24);
    let _ = timers.ok("alarm", (alarm.clone(),));
    let _ = timers.ok(
        "remind",
        ("call your mother".to_string(), "in 2 hours".to_string()),
    );

    let list = timers.ok("list", ());
    let names: Vec<String> = list
        .clone()
        .into_array()
        .unwrap()
        .iter()
        .map(|e| field::<String>(e, "name"))
        .collect();
    assert_eq!(names[..2], ["timer", "pasta"], "soonest first: {names:?}");
    assert!(names.contains(&format!("alarm {alarm}")) && names.contains(&"reminder 1".to_string()));

    let before: i64 = list.into_array().unwrap()[1].clone().cast::<rhai::Map>()["left_s"]
        .as_int()
        .unwrap();
    let after = timers.ok("add_time", ("5 minutes".to_string(), "pasta".to_string()));
    assert_eq!(field::<String>(&after, "name"), "pasta");
    let pasta_left = timers
        .ok("list", ())
        .into_array()
        .unwrap()
        .into_iter()
        .find(|e| field::<String>(e, "name") == "pasta")
        .map(|e| e.cast::<rhai::Map>()["left_s"].as_int().unwrap())
        .unwrap();
    assert!(
        (before + 299..=before + 300).contains(&pasta_left),
        "{before} -> {pasta_left}"
    );

    // "alarm" names one kind of which there is one; "" matches all, so it is ambiguous.
    assert_eq!(
        timers.ok("cancel", ("alarm".to_string(),)).cast::<String>(),
        format!("alarm {alarm}")
    );
    let error = timers.call("cancel", ("".to_string(),)).unwrap_err();
    assert!(error.contains("say which"), "{error}");
    let error = timers.call("cancel", ("eggs".to_string(),)).unwrap_err();
    assert!(error.contains("nothing is called \"eggs\""), "{error}");
    assert_eq!(timers.ok("cancel_all", ()).as_int().unwrap(), 3);
    assert!(timers.ok("list", ()).into_array().unwrap().is_empty());

    // The entries are in the schedule the daemon rings from.
    let _ = timers.ok("start", ("1 hour".to_string(), "tea".to_string()));
    let schedule = std::fs::read_to_string(dir.path().join("schedule.json")).unwrap();
    assert!(schedule.contains("Your tea timer is done."), "{schedule}");
    assert!(
        schedule.contains("Your tea timer went off at {time}."),
        "{schedule}"
    );
}

#[test]
fn speaking_needs_a_voice_and_respects_quiet_hours() {
    let dir = tmp();
    let speaker = Skill::load("speaker.rhai", dir.path());
    let error = speaker
        .call("say", ("Dinner is ready".to_string(),))
        .unwrap_err();
    assert!(
        error.contains("only `strawberry-spoke run` speaks"),
        "{error}"
    );
    assert!(!speaker.ok("is_quiet", ()).as_bool().unwrap());

    let quiet = strawberry_spoke::host::services::QuietHours {
        from: 0,
        to: 24 * 60 - 1,
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let settings = strawberry_spoke::host::HostSettings {
        quiet_hours: Some(quiet),
        services: strawberry_spoke::host::services::Services::with_speech(tx),
        ..skill::settings(dir.path())
    };
    let speaker = Skill::load_with("speaker.rhai", settings.clone());
    if !quiet.now() {
        return; // the last minute of the day
    }
    let error = speaker
        .call("say", ("Dinner is ready".to_string(),))
        .unwrap_err();
    assert!(
        error.contains("quiet hours") && error.contains("announce.quiet_hours"),
        "{error}"
    );
    assert!(rx.try_recv().is_err(), "nothing was queued");

    let loud = strawberry_spoke::host::HostSettings {
        quiet_hours: None,
        ..settings
    };
    let speaker = Skill::load_with("speaker.rhai", loud);
    let _ = speaker.ok("say", ("Dinner is ready".to_string(),));
    assert_eq!(
        rx.try_recv().unwrap(),
        strawberry_spoke::host::spoken::Spoken::Announce("Dinner is ready".into())
    );
}
