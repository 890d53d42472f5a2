//! Messages and their replies.

/// A message an actor can handle, with the type of its reply.
///
/// Derive it with `#[derive(Message)]`; `#[message(reply = T)]` sets the
/// reply type (default `()`), and `#[message(name = "...")]` overrides the
/// stable name used on the wire.
///
/// ```
/// use troupe_core::prelude::*;
///
/// #[derive(Message)]
/// #[message(reply = u64)]
/// struct Get;
///
/// assert_eq!(<Get as Message>::manifest(), "rust_out::Get");
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a message",
    label = "not a message",
    note = "add `#[derive(Message)]` to `{Self}` (and `#[message(reply = T)]` if a handler answers with a `T`)"
)]
pub trait Message: Send + 'static {
    /// What a handler of this message answers with.
    type Reply: Send + 'static;

    /// The stable name of this message type (its manifest): by default the
    /// module path and type name where it was defined.
    fn manifest() -> &'static str;
}

/// Compile-time check, used by `#[handlers]`, that a handler returns its
/// message's reply type.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "this handler returns `{R}` but the message's reply type is `{Self}`",
    label = "handler return type does not match the message's `reply`",
    note = "change the handler's return type, or declare `#[message(reply = {R})]` on the message"
)]
pub trait ReplyIs<R> {
    /// The reply itself.
    fn from_reply(r: R) -> Self;
}

impl<T> ReplyIs<T> for T {
    fn from_reply(r: T) -> T {
        r
    }
}

/// Passes a handler's return value through as `M`'s reply, failing to
/// compile (with the message above) when the types differ.
#[doc(hidden)]
#[inline(always)]
pub fn reply_from<M: Message, R>(r: R) -> M::Reply
where
    M::Reply: ReplyIs<R>,
{
    <M::Reply as ReplyIs<R>>::from_reply(r)
}
