//! The fuzz corpus (`fuzz/corpus/TARGET/`) and the regressions (`fuzz/regressions/TARGET/`, inputs that once broke a
//! parser), replayed on stable Rust through the fuzz targets' own checks (`apf_monitor::fuzzing`): what the fuzzers
//! found stays found.
use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut n = 0;
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let outcome = std::panic::catch_unwind(|| check(&data));
            assert!(
                outcome.is_ok(),
                "{target}: {} breaks the check",
                path.display()
            );
            n += 1;
        }
    }
    n
}

#[test]
fn every_corpus_input_passes_its_target_check() {
    for (target, check) in [
        ("exposition", apf_monitor::fuzzing::exposition as fn(&[u8])),
        (
            "exposition_protobuf",
            apf_monitor::fuzzing::exposition_protobuf,
        ),
        ("dumps", apf_monitor::fuzzing::dumps),
        ("objects", apf_monitor::fuzzing::objects),
        ("config", apf_monitor::fuzzing::config),
        ("silence", apf_monitor::fuzzing::silence),
        ("audit", apf_monitor::fuzzing::audit),
        ("prometheus_answer", apf_monitor::fuzzing::prometheus_answer),
        ("scenario", apf_monitor::fuzzing::scenario),
    ] {
        assert!(replay(target, check) > 0, "no corpus for {target}");
    }
}
