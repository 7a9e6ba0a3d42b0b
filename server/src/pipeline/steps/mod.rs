//! The four steps, each in its own module, all registered here. Each step
//! ends with its output and its checkpoint in one transaction.

mod chunk;
mod embed;
mod parse;
mod store;

pub use chunk::split;
pub use parse::extract_text;

use super::{StepCtx, StepError};
use crate::jobs::Step;

pub async fn run(ctx: &StepCtx<'_>) -> Result<(), StepError> {
    match ctx.step {
        Step::Parse => parse::run(ctx).await,
        Step::Chunk => chunk::run(ctx).await,
        Step::Embed => embed::run(ctx).await,
        Step::Store => store::run(ctx).await,
    }
}
