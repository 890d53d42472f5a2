//! `#[entity]`: `#[handlers]`, plus the `troupe_sharding::Entity` impl (the
//! stable type name and the registration of every handled message), plus a
//! hidden item that makes two entities of one name in a module collide.

use crate::handlers::{self, HandlerFn};
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, ItemImpl, Lit, LitStr, Type};

const NAME_EXAMPLE: &str = "for example `#[entity(name = \"counter\")]`";

/// `#[entity]` / `#[entity(name = "...")]` on `block`.
pub(crate) fn expand(attr: TokenStream, block: ItemImpl) -> TokenStream {
    let mut errors = Errors::default();
    let args = errors.take(parse_args(attr));
    let handlers = errors.take(handlers::parse(&block, "entity"));
    let type_name = errors.take(type_name(&block));
    let Some(handlers) = handlers else {
        // As `#[handlers]` does: no half-generated code next to the errors.
        return errors.into_compile_error();
    };
    let mut out = handlers::generate(&block, &handlers);
    let name = match (args, type_name) {
        // Without a usable type (a generic one, say) there is no impl.
        (_, None) => None,
        (Some(Some(lit)), Some(_)) => Some(EntityName {
            value: lit.value(),
            span: lit.span(),
        }),
        (Some(None), Some(type_name)) => {
            let what = "the entity's default name (its type's name)";
            let checked = check_name(&type_name.value, type_name.span, what).map_err(|e| {
                let hint = format!("{e}; give the entity a name, {NAME_EXAMPLE}");
                syn::Error::new(type_name.span, hint)
            });
            errors.take(checked);
            Some(type_name)
        }
        // With a bad attribute the entity is still declared, under its
        // default name, so that the code using it does not fail as well:
        // only the attribute's error is shown.
        (None, type_name) => type_name,
    };
    if let Some(name) = name {
        out.extend(entity_impl(&block, &handlers, &name.value));
        if errors.is_empty() {
            out.extend(name_marker(&name));
        }
    }
    out.extend(errors.into_compile_error());
    out
}

/// An entity type name and where it was written.
struct EntityName {
    value: String,
    span: Span,
}

/// Parses the attribute's arguments: `None` when there is no `name`.
fn parse_args(attr: TokenStream) -> syn::Result<Option<LitStr>> {
    let first = attr.clone().into_iter().next();
    if let Some(proc_macro2::TokenTree::Literal(lit)) =
        first.filter(|t| t.to_string().starts_with('"'))
    {
        return Err(syn::Error::new(
            lit.span(),
            format!("the name is given as `name = ...`: write `#[entity(name = {lit})]`"),
        ));
    }
    let mut name: Option<LitStr> = None;
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("name") {
            if name.is_some() {
                return Err(meta.error("`name` is given twice"));
            }
            name = Some(parse_name(&meta)?);
            Ok(())
        } else {
            let key = meta
                .path
                .get_ident()
                .map(|i| format!("`{i}`"))
                .unwrap_or_else(|| "this".into());
            Err(meta.error(format!(
                "unknown `entity` option {key}: the only option is `name = \"...\"`, {NAME_EXAMPLE}"
            )))
        }
    });
    parser.parse2(attr)?;
    Ok(name)
}

fn parse_name(meta: &ParseNestedMeta<'_>) -> syn::Result<LitStr> {
    if meta.input.is_empty() || meta.input.peek(syn::Token![,]) {
        return Err(meta.error(format!("expected `name = \"...\"`, {NAME_EXAMPLE}")));
    }
    let value: Expr = meta.value()?.parse()?;
    let lit = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => lit,
        other => {
            return Err(syn::Error::new_spanned(
                other,
                format!("the entity name must be a string literal, {NAME_EXAMPLE}"),
            ))
        }
    };
    check_name(&lit.value(), lit.span(), "the entity name")?;
    Ok(lit)
}

/// The last path segment of the impl block's type (the default name).
fn type_name(block: &ItemImpl) -> syn::Result<EntityName> {
    if !block.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &block.generics,
            "`#[entity]` cannot be used on a generic impl block: an entity type has one stable \
             name, so write `#[entity]` on the impl block of one concrete type",
        ));
    }
    let ident = match &*block.self_ty {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last().map(|s| &s.ident),
        _ => None,
    };
    let Some(ident) = ident else {
        return Err(syn::Error::new_spanned(
            &block.self_ty,
            "`#[entity]` goes on the impl block of a named actor type (`impl MyEntity { ... }`)",
        ));
    };
    let value = ident.to_string();
    let value = value.strip_prefix("r#").unwrap_or(&value).to_owned();
    Ok(EntityName {
        value,
        span: ident.span(),
    })
}

/// An entity name is non-empty ASCII letters, digits, `_`, `.` and `-`.
fn check_name(name: &str, span: Span, what: &str) -> syn::Result<()> {
    if name.is_empty() {
        return Err(syn::Error::new(
            span,
            format!("{what} must not be empty: write one, {NAME_EXAMPLE}"),
        ));
    }
    if let Some(c) = name.chars().find(|c| !is_name_char(*c)) {
        return Err(syn::Error::new(
            span,
            format!(
                "{what} `{name}` contains {c:?}: an entity name may only contain ASCII letters, \
                 digits, `_`, `.` and `-`"
            ),
        ));
    }
    Ok(())
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
}

/// `impl troupe_sharding::Entity`.
///
/// Each message is registered through `__private::register_message`, whose
/// bounds (`EntityRegistrar::message`'s, phrased as helper traits with
/// their own error messages) are checked at the handler: a message that is
/// not serialisable is reported at its type, a reply at the return type.
fn entity_impl(block: &ItemImpl, handlers: &[HandlerFn], name: &str) -> TokenStream {
    let self_ty = &block.self_ty;
    let where_clause = &block.generics.where_clause;
    let registrations = handlers.iter().map(|h| {
        let msg_ty = &h.msg_ty;
        let msg_span = msg_ty.span();
        let msg_at_msg = handlers::respan(quote!(#msg_ty), msg_span);
        let msg_at_ret = handlers::respan(quote!(#msg_ty), h.ret_span);
        let reply = quote_spanned! {h.ret_span=>
            <#msg_at_ret as ::troupe_core::Message>::Reply
        };
        quote_spanned! {msg_span=>
            ::troupe_sharding::__private::register_message::<Self, #msg_at_msg, #reply>(registrar)?;
        }
    });
    quote! {
        impl ::troupe_sharding::Entity for #self_ty #where_clause {
            const TYPE_NAME: &'static str = #name;

            fn register_messages(
                registrar: &mut ::troupe_sharding::EntityRegistrar<'_, Self>,
            ) -> ::core::result::Result<(), ::troupe_sharding::ShardingError> {
                #(#registrations)*
                ::core::result::Result::Ok(())
            }
        }
    }
}

/// The hidden constant named after the entity name: a second entity of the
/// same name in the module is a second definition of it.
fn name_marker(name: &EntityName) -> TokenStream {
    let ident = format_ident!(
        "__troupe_entity_name_{}",
        sanitise(&name.value),
        span = name.span
    );
    // Every token carries the name's span, so that both definitions are
    // shown at the names.
    quote_spanned! {name.span=>
        #[doc(hidden)]
        #[allow(non_upper_case_globals, dead_code)]
        const #ident: () = ();
    }
}

/// Maps an entity name to identifier characters, one to one: letters and
/// digits stay, `_` becomes `__`, `.` becomes `_d` and `-` becomes `_h`.
fn sanitise(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '_' => out.push_str("__"),
            '.' => out.push_str("_d"),
            '-' => out.push_str("_h"),
            c => out.push(c),
        }
    }
    out
}

/// Errors gathered from independent checks, reported together.
#[derive(Default)]
struct Errors(Option<syn::Error>);

impl Errors {
    fn take<T>(&mut self, r: syn::Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                match &mut self.0 {
                    Some(all) => all.combine(e),
                    None => self.0 = Some(e),
                }
                None
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    fn into_compile_error(self) -> TokenStream {
        self.0
            .map(syn::Error::into_compile_error)
            .unwrap_or_default()
    }
}
