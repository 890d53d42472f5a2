//! User mistakes with the macros give errors that point at the user's code
//! and say what to do.

#[test]
fn macro_misuse_is_explained() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
