//! Durations and clock times as people say them, for timers, alarms and reminders:
//! `parse_duration("1 hour 30 minutes")`, `parse_when("at six")`.
//!
//! Why in the host and not in each skill: the model passes on what the user said
//! ("ten minutes", "half an hour", "6:30 pm"), and parsing that in Rhai would be slow to
//! write and different in every skill. Only English words are understood; digits work
//! in any language, and the model writes digits when it can.

use jiff::civil::Time;
use jiff::{Span, Timestamp, ToSpan, Zoned};

/// The longest duration accepted: a timer for longer is a mistake.
const MAX_SECONDS: f64 = 7.0 * 24.0 * 3600.0;

fn number_word(word: &str) -> Option<f64> {
    const ONES: [&str; 20] = [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
    ];
    const TENS: [&str; 8] = [
        "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
    ];
    if let Some(n) = ONES.iter().position(|w| *w == word) {
        return Some(n as f64);
    }
    if let Some(n) = TENS.iter().position(|w| *w == word) {
        return Some((n as f64 + 2.0) * 10.0);
    }
    // "twenty-five"
    if let Some((tens, ones)) = word.split_once('-') {
        let (t, o) = (number_word(tens)?, number_word(ones)?);
        if t >= 20.0 && t % 10.0 == 0.0 && (1.0..10.0).contains(&o) {
            return Some(t + o);
        }
    }
    match word {
        "a" | "an" => Some(1.0),
        "half" => Some(0.5),
        "quarter" => Some(0.25),
        "couple" => Some(2.0),
        _ => None,
    }
}

fn unit_seconds(word: &str) -> Option<f64> {
    Some(match word {
        "s" | "sec" | "secs" | "second" | "seconds" => 1.0,
        "m" | "min" | "mins" | "minute" | "minutes" => 60.0,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3600.0,
        "d" | "day" | "days" => 86400.0,
        _ => return None,
    })
}

/// Splits `1h30m` and `90s` into numbers and units; words stay whole.
fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in text
        .to_lowercase()
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|w| !w.is_empty())
    {
        let mut current = String::new();
        let mut digits = None;
        for c in word.chars() {
            let is_digit = c.is_ascii_digit() || c == '.';
            if digits.is_some_and(|d| d != is_digit) && !current.is_empty() {
                out.push(std::mem::take(&mut current));
            }
            digits = Some(is_digit);
            current.push(c);
        }
        if !current.is_empty() {
            out.push(current);
        }
    }
    out
}

/// Seconds in a spoken or written duration: "10 minutes", "1h30m", "90 s", "half an
/// hour", "an hour and a half", "2.5 hours". A number needs a unit.
pub fn parse_duration(text: &str) -> Result<f64, String> {
    let refuse = |why: &str| {
        Err(format!(
            "cannot read {text:?} as a duration ({why}); say it like \"10 minutes\", \"1h30m\" or \"90 seconds\""
        ))
    };
    let mut total = 0.0;
    let mut pending: Option<f64> = None;
    let mut any = false;
    let words = tokens(text);
    let mut i = 0;
    while i < words.len() {
        let word = words[i].as_str();
        i += 1;
        if matches!(word, "and" | "for" | "in" | "of" | "the") {
            continue;
        }
        if let Ok(n) = word.parse::<f64>() {
            if pending.is_some() {
                return refuse("two numbers in a row");
            }
            pending = Some(n);
            continue;
        }
        if let Some(unit) = unit_seconds(word) {
            let Some(n) = pending.take() else {
                // "an hour and a half": the half belongs to the unit before.
                return refuse("a unit without a number");
            };
            total += n * unit;
            any = true;
            // "... and a half" after a unit.
            if words.get(i).map(String::as_str) == Some("and")
                && words.get(i + 1).map(String::as_str) == Some("a")
                && words.get(i + 2).map(String::as_str) == Some("half")
            {
                total += 0.5 * unit;
                i += 3;
            }
            continue;
        }
        if let Some(n) = number_word(word) {
            pending = Some(match pending {
                // "half an hour": half of one.
                Some(p) if p < 1.0 => p * n,
                Some(p) if n < 1.0 => p * n,
                Some(p) => p + n,
                None => n,
            });
            continue;
        }
        return refuse(&format!("`{word}` is not a number or a unit"));
    }
    if pending.is_some() {
        return refuse("a number without a unit");
    }
    if !any {
        return refuse("no duration in it");
    }
    if !(total > 0.0 && total <= MAX_SECONDS) {
        return refuse("it must be more than nothing and at most 7 days");
    }
    Ok(total)
}

/// A clock time in words or digits: `(hour, minute, has_meridiem)`. Understands
/// "18:05", "6:05 pm", "6pm", "6 p.m.", "six", "six thirty", "7 o'clock", "noon",
/// "midnight", "half past six", "quarter to seven".
fn parse_clock(text: &str) -> Result<(i8, i8, bool), String> {
    let refuse = || {
        format!(
            "cannot read {text:?} as a time of day; say it like \"18:05\", \"6:30 pm\" or \"seven\""
        )
    };
    let lower = text
        .to_lowercase()
        .replace("a.m.", "am")
        .replace("p.m.", "pm");
    let mut words: Vec<String> = Vec::new();
    for word in lower.split_whitespace() {
        // "6pm", "6:30pm"
        if let Some(num) = word.strip_suffix("am").or_else(|| word.strip_suffix("pm"))
            && !num.is_empty()
        {
            words.push(num.to_string());
            words.push(word[num.len()..].to_string());
        } else if word != "o'clock" && word != "oclock" {
            words.push(word.to_string());
        }
    }
    let (mut offset, mut rest): (i32, &[String]) = (0, &words);
    // "half past six", "quarter to seven", "ten past eight"
    if let [first, rel, tail @ ..] = rest
        && (rel == "past" || rel == "to")
    {
        let minutes = match first.as_str() {
            "half" => 30,
            "quarter" => 15,
            w => number_word(w)
                .or_else(|| w.parse().ok())
                .filter(|m| (1.0..60.0).contains(m))
                .ok_or_else(refuse)? as i32,
        };
        offset = if rel == "past" { minutes } else { -minutes };
        rest = tail;
    }
    let meridiem = rest
        .last()
        .map(String::as_str)
        .filter(|w| *w == "am" || *w == "pm");
    if meridiem.is_some() {
        rest = &rest[..rest.len() - 1];
    }
    let (mut hour, mut minute): (i32, i32) = match rest {
        [w] if w == "noon" || w == "midday" => (12, 0),
        [w] if w == "midnight" => (0, 0),
        [w] if w.contains(':') || w.contains('.') && w.len() > 2 => {
            let (h, m) = w.split_once([':', '.']).ok_or_else(refuse)?;
            (
                h.parse().map_err(|_| refuse())?,
                m.parse().map_err(|_| refuse())?,
            )
        }
        [h] => (word_or_digits(h).ok_or_else(refuse)?, 0),
        [h, m] => (
            word_or_digits(h).ok_or_else(refuse)?,
            word_or_digits(m).ok_or_else(refuse)?,
        ),
        _ => return Err(refuse()),
    };
    if !(0..24).contains(&hour) || !(0..60).contains(&minute) {
        return Err(refuse());
    }
    match meridiem {
        Some(_) if !(1..=12).contains(&hour) => return Err(refuse()),
        Some("pm") if hour < 12 => hour += 12,
        Some("am") if hour == 12 => hour = 0,
        _ => {}
    }
    let total = (hour * 60 + minute + offset).rem_euclid(24 * 60);
    hour = total / 60;
    minute = total % 60;
    Ok((
        hour as i8,
        minute as i8,
        meridiem.is_some() || hour > 12 || hour == 0,
    ))
}

fn word_or_digits(word: &str) -> Option<i32> {
    word.parse().ok().or_else(|| {
        number_word(word)
            .filter(|n| n.fract() == 0.0 && *n >= 0.0)
            .map(|n| n as i32)
    })
}

/// When `text` is, as Unix milliseconds, seen from `now`: "in 10 minutes", "10
/// minutes" (from now), "at 18:05", "6:30 pm", "seven", "tomorrow at 7". A clock time
/// is the next one to come: today while it is still ahead, else tomorrow; a time
/// without am/pm ("at six") is whichever of 6:00 and 18:00 comes first.
pub fn parse_when(text: &str, now: &Zoned) -> Result<i64, String> {
    let lower = text.trim().to_lowercase();
    let mut rest = lower.as_str();
    if let Some(after) = rest.strip_prefix("in ") {
        let secs = parse_duration(after)?;
        return Ok(now.timestamp().as_millisecond() + (secs * 1000.0) as i64);
    }
    if let Ok(secs) = parse_duration(rest) {
        return Ok(now.timestamp().as_millisecond() + (secs * 1000.0) as i64);
    }
    let mut days = 0;
    if let Some(after) = rest.strip_prefix("tomorrow") {
        days = 1;
        rest = after.trim_start();
    } else if let Some(after) = rest.strip_prefix("today") {
        rest = after.trim_start();
    }
    for prefix in ["at ", "for "] {
        if let Some(after) = rest.strip_prefix(prefix) {
            rest = after;
        }
    }
    let (hour, minute, exact) = parse_clock(rest)?;
    let at = |h: i8| -> Result<Zoned, String> {
        let time = Time::new(h, minute, 0, 0).map_err(|e| e.to_string())?;
        let mut day = now.date();
        let mut when = day
            .to_datetime(time)
            .to_zoned(now.time_zone().clone())
            .map_err(|e| e.to_string())?;
        if days > 0 {
            day = day
                .checked_add(Span::new().days(days))
                .map_err(|e| e.to_string())?;
            when = day
                .to_datetime(time)
                .to_zoned(now.time_zone().clone())
                .map_err(|e| e.to_string())?;
        } else if when <= *now {
            when = when.checked_add(1.day()).map_err(|e| e.to_string())?;
        }
        Ok(when)
    };
    let mut when = at(hour)?;
    if !exact && days == 0 && (1..12).contains(&hour) {
        let evening = at(hour + 12)?;
        if evening < when {
            when = evening;
        }
    }
    Ok(when.timestamp().as_millisecond())
}

/// Now, in the device's time zone.
pub fn now() -> Zoned {
    Timestamp::now().to_zoned(jiff::tz::TimeZone::system())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_as_people_say_them() {
        for (text, secs) in [
            ("10 minutes", 600.0),
            ("ten minutes", 600.0),
            ("1h30m", 5400.0),
            ("1 hour 30 minutes", 5400.0),
            ("an hour and a half", 5400.0),
            ("half an hour", 1800.0),
            ("90 s", 90.0),
            ("90s", 90.0),
            ("2.5 hours", 9000.0),
            ("twenty-five minutes", 1500.0),
            ("a minute and 30 seconds", 90.0),
            ("for 3 seconds", 3.0),
        ] {
            assert_eq!(parse_duration(text), Ok(secs), "{text}");
        }
        for bad in ["", "10", "minutes", "soon", "8 days", "0 minutes"] {
            let error = parse_duration(bad).unwrap_err();
            assert!(error.contains("10 minutes"), "{bad}: {error}");
        }
    }

    fn at(text: &str, now: &str) -> String {
        let now: Zoned = now.parse().unwrap();
        let ms = parse_when(text, &now).unwrap();
        Timestamp::from_millisecond(ms)
            .unwrap()
            .to_zoned(now.time_zone().clone())
            .strftime("%a %H:%M")
            .to_string()
    }

    #[test]
    fn clock_times_are_the_next_to_come() {
        let now = "2026-11-24T17:00:00+01:00[Europe/Berlin]";
        assert_eq!(at("18:05", now), "Tue 18:05");
        assert_eq!(at("at 6", now), "Tue 18:00");
        assert_eq!(at("six", now), "Tue 18:00");
        assert_eq!(at("6 am", now), "Wed 06:00");
        assert_eq!(at("6:30 p.m.", now), "Tue 18:30");
        assert_eq!(at("16:00", now), "Wed 16:00");
        assert_eq!(at("half past six", now), "Tue 18:30");
        assert_eq!(at("quarter to seven", now), "Tue 18:45");
        assert_eq!(at("tomorrow at 7", now), "Wed 07:00");
        assert_eq!(at("noon", now), "Wed 12:00");
        assert_eq!(at("in 10 minutes", now), "Tue 17:10");
        assert_eq!(at("7 o'clock", now), "Tue 19:00");
        let morning = "2026-11-24T05:00:00+01:00[Europe/Berlin]";
        assert_eq!(at("at six", morning), "Tue 06:00");
        for bad in ["25:00", "13 pm", "teatime"] {
            let now: Zoned = now.parse().unwrap();
            assert!(parse_when(bad, &now).is_err(), "{bad}");
        }
    }
}
