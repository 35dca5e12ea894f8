//! Arbitrary bytes as a pool config and as a pools file: a valid config or a typed error,
//! never a panic. `cargo +nightly fuzz run config` (from the repository root).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(config) = pooler::PoolConfig::from_toml_str(text) {
        assert!(config.validate().is_ok());
    }
});
