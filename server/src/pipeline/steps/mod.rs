//! The four steps, each in its own module, all registered here. Each step
//! ends with its output and its checkpoint in one transaction.

mod chunk;
mod embed;
mod parse;
mod store;

pub use chunk::{chunk_for, split, Sizing, CHUNK_CHARS, OVERLAP_CHARS};

use super::{StepCtx, StepError};
use crate::jobs::Step;

/// What the job does after a step that succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// On to the next step.
    Continue,
    /// The step moved the job to another queue (a long document to `slow`);
    /// this run ends here, and a worker of that queue takes it from there.
    HandedOver,
    /// The last step's commit made the job `done`.
    Completed,
}

pub async fn run(ctx: &StepCtx<'_>) -> Result<Next, StepError> {
    match ctx.step {
        Step::Parse => parse::run(ctx).await,
        Step::Chunk => chunk::run(ctx).await.map(|()| Next::Continue),
        Step::Embed => embed::run(ctx).await.map(|()| Next::Continue),
        Step::Store => store::run(ctx).await.map(|()| Next::Completed),
    }
}
