//! Skill search by meaning on the real model (all-MiniLM-L6-v2, fetched by
//! `tests/setup.sh`): the model itself, the hybrid ranking, the lexical fallback, and
//! the cache that embeds each skill text once.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use strawberry_spoke::embed::{Semantic, cosine};
use strawberry_spoke::skills::search::{self, ClassIndex, Doc};
use strawberry_spoke::skills::{ClassDoc, Example, Param, SkillFunction, ValueType};

use crate::support::cpu;

fn model_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/stt-test/minilm");
    assert!(
        dir.join("model.safetensors").is_file(),
        "{} is missing: run tests/setup.sh first (the README's test line does)",
        dir.display()
    );
    dir
}

/// One model for the whole file (loading takes a fraction of a second, but the tests
/// that count embeddings use their own).
fn shared() -> Arc<Semantic> {
    static MODEL: OnceLock<Arc<Semantic>> = OnceLock::new();
    MODEL
        .get_or_init(|| Arc::new(Semantic::load(&model_dir()).unwrap_or_else(|e| panic!("{e}"))))
        .clone()
}

fn function(class: &str, name: &str, params: &[&str], summary: &str) -> SkillFunction {
    SkillFunction {
        class: class.into(),
        name: name.into(),
        params: params
            .iter()
            .map(|p| Param {
                name: (*p).into(),
                ty: ValueType::Any,
                default: None,
                description: String::new(),
            })
            .collect(),
        returns: ValueType::Unit,
        returns_doc: String::new(),
        summary: summary.into(),
        docstring: String::new(),
        requests: Vec::new(),
        confirm: false,
        model_callable: true,
        remote: true,
        file: PathBuf::new(),
        line: 1,
    }
}

fn class(name: &str, summary: &str, functions: &[(&str, &[&str], &str)]) -> ClassDoc {
    ClassDoc {
        name: name.into(),
        summary: summary.into(),
        description: String::new(),
        examples: Vec::new(),
        functions: functions
            .iter()
            .map(|(f, params, s)| function(name, f, params, s))
            .collect(),
    }
}

/// A living room's skills, where "television" and "telly" are nowhere in the text.
fn living_room() -> Vec<ClassDoc> {
    vec![
        class(
            "TvSkill",
            "The living room TV.",
            &[
                ("power_on", &[], "Switch the TV on."),
                ("power_off", &[], "Switch the TV off."),
                ("set_channel", &["channel"], "Change the channel."),
            ],
        ),
        class(
            "VolumeSkill",
            "The speaker volume.",
            &[
                ("set_volume", &["level"], "Set the volume from 0 to 100."),
                ("volume_up", &["step"], "Turn the volume up."),
                ("volume_down", &["step"], "Turn the volume down."),
                ("mute", &[], "Turn the sound off."),
                ("unmute", &[], "Turn the sound on again."),
            ],
        ),
        class(
            "LightSkill",
            "The ceiling light.",
            &[
                ("light_on", &[], "Turn the light on."),
                ("light_off", &[], "Turn the light off."),
            ],
        ),
        class(
            "WeatherSkill",
            "Weather outside.",
            &[
                ("temperature", &[], "The temperature outside now."),
                ("forecast", &["day"], "The forecast for a day."),
            ],
        ),
    ]
}

fn ranked(index: &ClassIndex, classes: &[ClassDoc], query: &str) -> Vec<String> {
    index
        .search(classes, query, 3)
        .iter()
        .map(|hit| hit.function.qualified_name())
        .collect()
}

#[test]
fn the_model_knows_a_television_is_a_tv() {
    let _cores = cpu::heavy_blocking();
    let s = shared();
    let q = s.embed_query("turn on the television");
    let tv = cosine(&q, &s.embed_query("Switch the TV on"));
    for other in [
        "Set the volume of the speaker",
        "Turn the kitchen light off",
        "Start a timer",
        "What is the weather tomorrow",
    ] {
        let score = cosine(&q, &s.embed_query(other));
        assert!(tv > score + 0.2, "{other}: {score} vs the TV's {tv}");
    }
    let v = s.embed_query("anything");
    let norm: f32 = v.iter().map(|a| a * a).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "{norm}");
}

#[test]
fn synonyms_find_the_function_with_the_model_and_not_without() {
    let _cores = cpu::heavy_blocking();
    let classes = living_room();
    let hybrid = ClassIndex::build_with(&classes, Some(shared()));
    let lexical = ClassIndex::build_with(&classes, None);
    for (query, wanted) in [
        ("turn on the television", "TvSkill.power_on"),
        ("switch the telly off", "TvSkill.power_off"),
        ("how warm is it outside", "WeatherSkill.temperature"),
        ("put the lamp on", "LightSkill.light_on"),
    ] {
        let found = ranked(&hybrid, &classes, query);
        assert_eq!(
            found.first().map(String::as_str),
            Some(wanted),
            "{query}: {found:?}"
        );
    }
    // The lexical ranker alone does not know the television (the example).
    let found = ranked(&lexical, &classes, "turn on the television");
    assert_ne!(
        found.first().map(String::as_str),
        Some("TvSkill.power_on"),
        "{found:?}"
    );
}

#[test]
fn without_a_model_the_ranking_is_lexical() {
    let _cores = cpu::heavy_blocking();
    let classes = living_room();
    let index = ClassIndex::build_with(&classes, None);
    let docs: Vec<Doc<'_>> = (0..classes.len())
        .flat_map(|ci| (0..classes[ci].functions.len()).map(move |fi| (ci, fi)))
        .map(|(ci, fi)| index.doc(ci, fi))
        .collect();
    for query in ["volume up", "turn on the television", ""] {
        assert_eq!(
            search::score(&docs, query),
            search::lexical_score(&docs, query),
            "{query}"
        );
    }
    // Documents of indexes with and without a model rank on the lexical scale.
    let with = ClassIndex::build_with(&classes, Some(shared()));
    let mixed = [index.doc(0, 0), with.doc(0, 1)];
    assert_eq!(
        search::score(&mixed, "switch the tv on"),
        search::lexical_score(&mixed, "switch the tv on")
    );
}

#[test]
fn skill_text_is_embedded_once_per_version() {
    let _cores = cpu::heavy_blocking();
    let semantic = Arc::new(Semantic::load(&model_dir()).unwrap_or_else(|e| panic!("{e}")));
    let classes = living_room();
    let functions: usize = classes.iter().map(|c| c.functions.len()).sum();
    let first = ClassIndex::build_with(&classes, Some(semantic.clone()));
    assert_eq!(semantic.computed() as usize, functions);
    // The same classes again (a reload, a peer registering again): no new embedding,
    // and searches embed only the request.
    let again = ClassIndex::build_with(&classes, Some(semantic.clone()));
    assert_eq!(semantic.computed() as usize, functions);
    ranked(&again, &classes, "switch the telly on");
    assert_eq!(semantic.computed() as usize, functions);
    // One docstring changed: that function alone is embedded again.
    let mut changed = classes.clone();
    changed[0].functions[0].docstring = "Takes a few seconds to warm up.".into();
    drop(first);
    drop(again);
    let third = ClassIndex::build_with(&changed, Some(semantic.clone()));
    assert_eq!(semantic.computed() as usize, functions + 1);
    // The old version's vector was held by no index any more: the build dropped it.
    assert_eq!(semantic.cached(), functions);
    // While an index holds the old version (a registry being replaced), it stays
    // until that index is gone and another build sweeps.
    let old = ClassIndex::build_with(&classes, Some(semantic.clone()));
    assert_eq!(semantic.computed() as usize, functions + 2);
    let fourth = ClassIndex::build_with(&changed, Some(semantic.clone()));
    assert_eq!(semantic.cached(), functions + 1);
    drop(old);
    let fifth = ClassIndex::build_with(&changed, Some(semantic.clone()));
    assert_eq!(semantic.cached(), functions);
    assert_eq!(semantic.computed() as usize, functions + 2);
    drop((third, fourth, fifth));
}

/// A kitchen where "milk" is a word of the coffee machine's documentation and not of
/// the shopping list's.
fn kitchen(requests: &[&str], example: Option<&str>) -> Vec<ClassDoc> {
    let mut shopping = class(
        "ShoppingListSkill",
        "The household's shopping list.",
        &[
            ("add_item", &["item"], "Add an item to the shopping list."),
            ("read_list", &[], "Read out the shopping list."),
        ],
    );
    shopping.functions[0].requests = requests.iter().map(|r| r.to_string()).collect();
    if let Some(request) = example {
        shopping.examples.push(Example {
            request: request.into(),
            code: "device.ShoppingListSkill.add_item(\"eggs\")".into(),
        });
    }
    vec![
        shopping,
        class(
            "CoffeeSkill",
            "The bean-to-cup coffee machine.",
            &[
                ("make_coffee", &["drink"], "Make a coffee drink."),
                (
                    "clean_milk_system",
                    &[],
                    "Rinse the milk system after a milk drink.",
                ),
                ("beans_level", &[], "How full the bean container is."),
            ],
        ),
    ]
}

#[test]
fn ways_of_asking_find_a_function_its_documentation_does_not() {
    let _cores = cpu::heavy_blocking();
    let semantic = Arc::new(Semantic::load(&model_dir()).unwrap_or_else(|e| panic!("{e}")));
    let query = "we're out of milk";
    let bare = kitchen(&[], None);
    let index = ClassIndex::build_with(&bare, Some(semantic.clone()));
    assert_ne!(
        ranked(&index, &bare, query).first().map(String::as_str),
        Some("ShoppingListSkill.add_item")
    );
    // The function's own `@request` lines...
    let asked = kitchen(&["we're out of eggs", "put bread on the list"], None);
    let index = ClassIndex::build_with(&asked, Some(semantic.clone()));
    assert_eq!(
        ranked(&index, &asked, query).first().map(String::as_str),
        Some("ShoppingListSkill.add_item")
    );
    // ...or a class `@example` whose code calls it.
    let example = kitchen(&[], Some("we're out of eggs"));
    let index = ClassIndex::build_with(&example, Some(semantic.clone()));
    assert_eq!(
        ranked(&index, &example, query).first().map(String::as_str),
        Some("ShoppingListSkill.add_item")
    );
    // Each way of asking is embedded once, like the documentation.
    let before = semantic.computed();
    ClassIndex::build_with(&asked, Some(semantic.clone()));
    assert_eq!(semantic.computed(), before);
}
