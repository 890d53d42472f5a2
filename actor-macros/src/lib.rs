//! Macros of Troupe, re-exported by `troupe_core` (use them from there).
//!
//! - `#[derive(Message)]` with `#[message(reply = T, name = "...")]`
//! - `#[handlers]` on an impl block of `async fn` handlers

use proc_macro::TokenStream;

mod handlers;
mod message;

/// Derives `troupe_core::Message`.
///
/// `#[message(reply = T)]` sets the reply type (default `()`);
/// `#[message(name = "...")]` sets the stable name (manifest) used on the
/// wire, by default `module::path::TypeName`.
#[proc_macro_derive(Message, attributes(message))]
pub fn derive_message(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    message::expand(input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Turns each `async fn name(&mut self, msg: M, ctx: &mut Context<Self>) -> R`
/// of an impl block into `impl Handler<M>`; `ctx` may be left out. `R` must
/// be `M`'s reply type.
#[proc_macro_attribute]
pub fn handlers(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        let attr = proc_macro2::TokenStream::from(attr);
        return syn::Error::new_spanned(attr, "`#[handlers]` takes no arguments")
            .into_compile_error()
            .into();
    }
    let block = syn::parse_macro_input!(item as syn::ItemImpl);
    handlers::expand(block)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
