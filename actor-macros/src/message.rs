//! `#[derive(Message)]`.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{DeriveInput, LitStr, Type};

pub(crate) fn expand(input: DeriveInput) -> syn::Result<TokenStream> {
    let mut reply: Option<Type> = None;
    let mut name: Option<LitStr> = None;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("message")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("reply") {
                if meta.input.is_empty() || meta.input.peek(syn::Token![,]) {
                    return Err(meta.error("expected `reply = Type`, for example `#[message(reply = u64)]`"));
                }
                reply = Some(meta.value()?.parse()?);
                Ok(())
            } else if meta.path.is_ident("name") {
                if meta.input.is_empty() || meta.input.peek(syn::Token![,]) {
                    return Err(meta.error("expected `name = \"...\"`, for example `#[message(name = \"shop.Order\")]`"));
                }
                let lit: LitStr = meta.value()?.parse()?;
                if lit.value().is_empty() {
                    return Err(syn::Error::new(lit.span(), "the message name must not be empty"));
                }
                name = Some(lit);
                Ok(())
            } else {
                Err(meta.error("unknown `message` option: expected `reply = Type` or `name = \"...\"`"))
            }
        })?;
    }
    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let reply = reply.map(|t| quote!(#t)).unwrap_or_else(|| quote!(()));
    let manifest = match name {
        Some(lit) => quote!(#lit),
        None => quote!(::core::concat!(
            ::core::module_path!(),
            "::",
            ::core::stringify!(#ident)
        )),
    };
    Ok(quote! {
        impl #impl_generics ::troupe_core::Message for #ident #ty_generics #where_clause {
            type Reply = #reply;
            fn manifest() -> &'static str {
                #manifest
            }
        }
    })
}
