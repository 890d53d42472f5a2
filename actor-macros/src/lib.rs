//! Macros of Troupe, re-exported by `troupe_core` (use them from there).
//!
//! - `#[derive(Message)]` with `#[message(reply = T, name = "...")]`
//! - `#[handlers]` on an impl block of `async fn` handlers
//! - `#[entity]` on the impl block of a sharded entity's handlers
//!   (re-exported by `troupe_sharding`)

use proc_macro::TokenStream;

mod entity;
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

/// Declares a sharded entity type: `#[handlers]`, plus the
/// `troupe_sharding::Entity` impl. Re-exported by `troupe_sharding`; use it
/// from there.
///
/// Write it on the inherent impl block of the entity's handlers, in the
/// same form as `#[handlers]`. Every handled message is registered for
/// remoting, so each message and its reply must implement
/// `serde::Serialize` and `serde::Deserialize`; a message that does not is
/// a compile error at the handler.
///
/// The entity's stable type name is the type's name as written (`Counter`
/// below) unless `#[entity(name = "...")]` gives one: non-empty, of ASCII
/// letters, digits, `_`, `.` and `-`. It must stay the same for the life of
/// the cluster's data. Two entities of the same name in one module fail to
/// compile (the name `__troupe_entity_name_...` is then defined twice);
/// across modules, `ClusterSharding::start` refuses the second one.
///
/// ```ignore
/// use serde::{Deserialize, Serialize};
/// use troupe_core::prelude::*;
/// use troupe_sharding::entity;
///
/// #[derive(Message, Serialize, Deserialize)]
/// #[message(reply = u64)]
/// struct Increment { by: u64 }
///
/// #[derive(Default)]
/// struct Counter { value: u64 }
/// impl Actor for Counter {}
///
/// #[entity] // or #[entity(name = "shop.counter")]
/// impl Counter {
///     async fn increment(&mut self, msg: Increment, _ctx: &mut Context<Self>) -> u64 {
///         self.value += msg.by;
///         self.value
///     }
/// }
///
/// assert_eq!(<Counter as troupe_sharding::Entity>::TYPE_NAME, "Counter");
/// ```
#[proc_macro_attribute]
pub fn entity(attr: TokenStream, item: TokenStream) -> TokenStream {
    let block = syn::parse_macro_input!(item as syn::ItemImpl);
    entity::expand(attr.into(), block).into()
}
