//! `#[handlers]`, and the handler parsing and code generation that
//! `#[entity]` shares.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, Ident, ImplItem, ImplItemFn, ItemImpl, ReturnType, Type};

const SIGNATURE: &str =
    "a handler is `async fn name(&mut self, msg: MessageType, ctx: &mut Context<Self>) -> Reply` \
                         (`ctx` may be left out)";

/// One `async fn` handler of an impl block, checked.
pub(crate) struct HandlerFn {
    /// The method's name.
    name: Ident,
    /// The message type (the second parameter).
    pub(crate) msg_ty: Type,
    /// Whether the method takes `ctx: &mut Context<Self>`.
    with_ctx: bool,
    /// The return type as written (`()` when left out).
    ret_ty: TokenStream,
    /// The return type's span (the name's when it is left out).
    pub(crate) ret_span: Span,
}

/// `#[handlers]`: the impl block, then one `impl Handler<M>` per handler.
pub(crate) fn expand(block: ItemImpl) -> syn::Result<TokenStream> {
    let handlers = parse(&block, "handlers")?;
    Ok(generate(&block, &handlers))
}

/// Checks every `fn` of `block` (written under `#[attr]`) and returns its
/// handlers in order; all mistakes are reported together.
pub(crate) fn parse(block: &ItemImpl, attr: &str) -> syn::Result<Vec<HandlerFn>> {
    if let Some((_, path, _)) = &block.trait_ {
        return Err(syn::Error::new_spanned(
            path,
            format!(
                "`#[{attr}]` goes on an inherent impl block (`impl MyActor {{ ... }}`), not on a trait impl"
            ),
        ));
    }
    let mut handlers = Vec::new();
    let mut errors: Option<syn::Error> = None;
    for item in &block.items {
        if let ImplItem::Fn(f) = item {
            match parse_fn(f) {
                Ok(h) => handlers.push(h),
                Err(e) => match &mut errors {
                    Some(all) => all.combine(e),
                    None => errors = Some(e),
                },
            }
        }
    }
    match errors {
        Some(e) => Err(e),
        None => Ok(handlers),
    }
}

/// The impl block itself followed by `impl Handler<M>` for each handler.
pub(crate) fn generate(block: &ItemImpl, handlers: &[HandlerFn]) -> TokenStream {
    let impls = handlers.iter().map(|h| handler_impl(block, h));
    quote! {
        #block
        #(#impls)*
    }
}

fn parse_fn(f: &ImplItemFn) -> syn::Result<HandlerFn> {
    let sig = &f.sig;
    let name = &sig.ident;
    if sig.asyncness.is_none() {
        return Err(syn::Error::new(
            sig.fn_token.span(),
            format!("handler `{name}` must be an `async fn`: write `async fn {name}(...)`"),
        ));
    }
    if !sig.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &sig.generics,
            "handlers cannot be generic",
        ));
    }
    let mut inputs = sig.inputs.iter();
    match inputs.next() {
        Some(FnArg::Receiver(r)) if r.reference.is_some() && r.mutability.is_some() => {}
        Some(other) => {
            return Err(syn::Error::new_spanned(
                other,
                format!("handler `{name}` must take `&mut self` first; {SIGNATURE}"),
            ))
        }
        None => {
            return Err(syn::Error::new(
                sig.paren_token.span.join(),
                format!("handler `{name}` takes no arguments; {SIGNATURE}"),
            ))
        }
    }
    let msg_ty: Type = match inputs.next() {
        Some(FnArg::Typed(t)) => (*t.ty).clone(),
        Some(other) => return Err(syn::Error::new_spanned(other, SIGNATURE)),
        None => {
            return Err(syn::Error::new(
                sig.paren_token.span.join(),
                format!("handler `{name}` has no message parameter; {SIGNATURE}"),
            ))
        }
    };
    if let Type::Reference(r) = &msg_ty {
        return Err(syn::Error::new_spanned(
            r,
            "the message is passed by value: take `msg: MessageType`, not a reference",
        ));
    }
    let with_ctx = match inputs.next() {
        None => false,
        Some(FnArg::Typed(t)) if is_context_ref(&t.ty) => true,
        Some(other) => {
            return Err(syn::Error::new_spanned(
                other,
                format!("the third parameter of handler `{name}` must be `ctx: &mut Context<Self>`; {SIGNATURE}"),
            ))
        }
    };
    if let Some(extra) = inputs.next() {
        return Err(syn::Error::new_spanned(
            extra,
            format!("handler `{name}` has too many parameters; {SIGNATURE}"),
        ));
    }
    let (ret_ty, ret_span): (TokenStream, Span) = match &sig.output {
        ReturnType::Default => (quote!(()), sig.ident.span()),
        ReturnType::Type(_, t) => (quote!(#t), t.span()),
    };
    Ok(HandlerFn {
        name: name.clone(),
        msg_ty,
        with_ctx,
        ret_ty,
        ret_span,
    })
}

fn handler_impl(block: &ItemImpl, h: &HandlerFn) -> TokenStream {
    let HandlerFn {
        name,
        msg_ty,
        with_ctx,
        ret_ty,
        ret_span,
    } = h;
    let ret_span = *ret_span;
    let self_ty = &block.self_ty;
    let (impl_generics, _, where_clause) = block.generics.split_for_impl();
    let call = if *with_ctx {
        quote!(Self::#name(self, msg, ctx))
    } else {
        quote!({ let _ = ctx; Self::#name(self, msg) })
    };
    // Every token of the check carries the span of the user's return type,
    // so a mismatch is reported there.
    let msg_ty_at_ret = respan(quote!(#msg_ty), ret_span);
    let ret_ty_at_ret = respan(ret_ty.clone(), ret_span);
    let convert = quote_spanned! {ret_span=>
        ::troupe_core::__private::reply_from::<#msg_ty_at_ret, #ret_ty_at_ret>
    };
    quote! {
        impl #impl_generics ::troupe_core::Handler<#msg_ty> for #self_ty #where_clause {
            #[allow(clippy::manual_async_fn)]
            fn handle(
                &mut self,
                msg: #msg_ty,
                ctx: &mut ::troupe_core::Context<Self>,
            ) -> impl ::core::future::Future<Output = <#msg_ty as ::troupe_core::Message>::Reply> + ::core::marker::Send {
                let fut = #call;
                async move { #convert(fut.await) }
            }
        }
    }
}

/// True for `&mut Context<Self>` (any path ending in `Context`).
fn is_context_ref(ty: &Type) -> bool {
    match ty {
        Type::Reference(r) if r.mutability.is_some() => match &*r.elem {
            Type::Path(p) => p.path.segments.last().is_some_and(|s| s.ident == "Context"),
            _ => false,
        },
        _ => false,
    }
}

/// Gives every token of `ts` the span `span`.
pub(crate) fn respan(ts: TokenStream, span: Span) -> TokenStream {
    ts.into_iter()
        .map(|mut tt| {
            if let proc_macro2::TokenTree::Group(g) = &tt {
                let mut group = proc_macro2::Group::new(g.delimiter(), respan(g.stream(), span));
                group.set_span(span);
                tt = proc_macro2::TokenTree::Group(group);
            } else {
                tt.set_span(span);
            }
            tt
        })
        .collect()
}
