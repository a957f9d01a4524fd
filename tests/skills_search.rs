//! Search ranking: relevance over names and docs, typos, determinism.

use std::path::Path;

use strawberry_spoke::skills::Registry;

use crate::support::skill;

fn registry() -> Registry {
    let settings = skill::quick_settings();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/skills_search");
    let (registry, errors) = Registry::load(&dir, &settings);
    assert!(errors.is_empty(), "{errors:?}");
    registry
}

fn names(registry: &Registry, query: &str, limit: usize) -> Vec<String> {
    registry
        .search(query, limit)
        .iter()
        .map(|hit| hit.function.qualified_name())
        .collect()
}

#[test]
fn an_empty_query_lists_everything_by_name() {
    let registry = registry();
    let all = names(&registry, "", 100);
    assert_eq!(all.len(), 13);
    let mut sorted = all.clone();
    sorted.sort();
    assert_eq!(all, sorted);
    assert_eq!(names(&registry, "  ", 3), all[..3]);
    assert!(registry.search("", 100).iter().all(|hit| hit.score == 0.0));
}

#[test]
fn a_word_only_in_a_docstring_finds_the_function() {
    let registry = registry();
    assert_eq!(names(&registry, "song", 1), ["MusicSkill.play"]);
    assert_eq!(names(&registry, "play a few songs", 1), ["MusicSkill.play"]);
}

#[test]
fn a_word_only_in_a_request_line_finds_the_function() {
    let registry = registry();
    assert_eq!(names(&registry, "so gloomy", 1), ["LightsSkill.turn_on"]);
}

#[test]
fn typos_still_match() {
    let registry = registry();
    let volume = names(&registry, "volum", 2);
    assert_eq!(volume, ["VolumeSkill.get_volume", "VolumeSkill.set_volume"]);
    assert_eq!(
        names(&registry, "temprature", 1),
        ["ClimateSkill.temperature"]
    );
    assert_eq!(
        names(&registry, "brigthness", 1),
        ["LightsSkill.set_brightness"]
    );
}

#[test]
fn a_class_name_hit_ranks_above_a_docstring_hit() {
    let registry = registry();
    let mut hits = names(&registry, "timer", 10);
    assert_eq!(hits.len(), 3, "{hits:?}");
    assert_eq!(hits.pop().as_deref(), Some("AlarmSkill.set_alarm"));
    hits.sort();
    assert_eq!(hits, ["TimerSkill.cancel", "TimerSkill.start"]);
}

#[test]
fn names_and_summaries_outrank_passing_mentions() {
    let registry = registry();
    assert_eq!(
        names(&registry, "switch the lamp off", 1),
        ["LightsSkill.turn_off"]
    );
    assert_eq!(
        names(&registry, "how warm is the room temperature", 1),
        ["ClimateSkill.temperature"]
    );
    assert_eq!(names(&registry, "next track", 1), ["MusicSkill.next_track"]);
    assert!(
        names(&registry, "xylophone", 10).is_empty(),
        "no match, no results"
    );
}

#[test]
fn ordering_is_deterministic_with_ties_by_name() {
    let registry = registry();
    for query in ["lamp", "room", "volume", "set", "music pause"] {
        let hits = registry.search(query, 100);
        assert!(!hits.is_empty(), "{query}");
        for pair in hits.windows(2) {
            assert!(
                pair[0].score > pair[1].score
                    || (pair[0].score == pair[1].score
                        && pair[0].function.qualified_name() < pair[1].function.qualified_name()),
                "{query}: {} ({}) before {} ({})",
                pair[0].function.qualified_name(),
                pair[0].score,
                pair[1].function.qualified_name(),
                pair[1].score
            );
        }
        assert_eq!(names(&registry, query, 100), names(&registry, query, 100));
        assert_eq!(
            names(&registry, query, 2),
            names(&registry, query, 100)[..2.min(hits.len())]
        );
    }
}
