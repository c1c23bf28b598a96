//! The schemas themselves: valid draft 2020-12, every example passes, every schema-error
//! fixture fails.

use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn load_yaml(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap();
    deepcli::config::yaml::parse(&text)
        .unwrap()
        .map_or(serde_json::Value::Null, |n| n.to_json())
}

fn schema(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(root().join(format!("schema/{name}.schema.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn schemas_are_valid_draft_2020_12_with_descriptions() {
    for name in ["agents", "channels", "bindings"] {
        let s = schema(name);
        assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema");
        jsonschema::meta::validate(&s).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut missing = Vec::new();
        undocumented(&s, String::new(), &mut missing);
        assert!(
            missing.is_empty(),
            "{name}: properties without description: {missing:?}"
        );
    }
}

fn undocumented(node: &serde_json::Value, path: String, out: &mut Vec<String>) {
    if let Some(map) = node.as_object() {
        if let Some(props) = map.get("properties").and_then(|p| p.as_object()) {
            for (key, prop) in props {
                let is_schema = prop.is_object();
                if is_schema && prop.get("description").is_none() && prop.get("$ref").is_none() {
                    out.push(format!("{path}/{key}"));
                }
            }
        }
        for (key, value) in map {
            undocumented(value, format!("{path}/{key}"), out);
        }
    }
}

#[test]
fn every_example_file_passes_its_schema() {
    for example in ["quickstart", "multi-account-slack", "broken"] {
        for name in ["agents", "channels", "bindings"] {
            let file = root().join(format!("examples/{example}/{name}.yaml"));
            let text = std::fs::read_to_string(&file).unwrap();
            assert!(
                text.starts_with(&format!(
                    "# yaml-language-server: $schema=../../schema/{name}.schema.json"
                )),
                "{} lacks the modeline",
                file.display()
            );
            if example == "broken" {
                continue;
            }
            let validator = jsonschema::validator_for(&schema(name)).unwrap();
            let instance = load_yaml(&file);
            let errors: Vec<String> = validator
                .iter_errors(&instance)
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "{}: {errors:?}", file.display());
        }
    }
}

#[test]
fn every_schema_error_fixture_fails_its_schema() {
    let dir = root().join("tests/fixtures/rules/schema/fail");
    let expected = std::fs::read_to_string(dir.join("expected.txt")).unwrap();
    let mut failing = 0;
    for name in ["agents", "channels", "bindings"] {
        // Only the files the fixture names as broken; the others support them.
        if !expected.contains(&format!("{name}.yaml:")) {
            continue;
        }
        let file = dir.join(format!("{name}.yaml"));
        let validator = jsonschema::validator_for(&schema(name)).unwrap();
        assert!(
            !validator.is_valid(&load_yaml(&file)),
            "{} passes its schema",
            file.display()
        );
        failing += 1;
    }
    assert!(failing > 0);
}
