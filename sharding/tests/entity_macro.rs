//! `#[entity]`: what it accepts, and the errors its misuse gives (they point
//! at the user's code and say what to do).

#[test]
fn entity_macro() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui-pass/*.rs");
    t.compile_fail("tests/ui/*.rs");
}
