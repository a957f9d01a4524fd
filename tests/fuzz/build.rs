//! Links libFuzzer (which brings `main`) from the system: Debian's `libfuzzer-19-dev`
//! by default, any other directory holding `libFuzzer.a` through `LIBFUZZER_DIR`. The
//! libfuzzer-sys crate would build it from source, but its build dependency on
//! `cc/parallel` changes the features of `cc` and so the hash of every C-building
//! crate (ring, whisper.cpp, wasmtime): the whole dependency tree would be rebuilt
//! instead of reused from the main crate's target dir.

fn main() {
    println!("cargo:rerun-if-env-changed=LIBFUZZER_DIR");
    let dir = std::env::var("LIBFUZZER_DIR").unwrap_or_else(|_| "/usr/lib/llvm-19/lib".into());
    if !std::path::Path::new(&dir).join("libFuzzer.a").exists() {
        panic!(
            "no libFuzzer.a in {dir}: install it (apt-get install libfuzzer-19-dev) or point LIBFUZZER_DIR at the directory holding it"
        );
    }
    println!("cargo:rustc-link-search=native={dir}");
    println!("cargo:rustc-link-lib=static=Fuzzer");
    println!("cargo:rustc-link-lib=stdc++");
}
