//! Settling a channel's deliveries, acks grouped.
//!
//! Every ack of a quorum queue is a Raft command on the broker (a log
//! write, and on a cluster a round to the replicas), and most of
//! RabbitMQ's CPU per job. Jobs that finish together (group commit makes
//! them finish in the same moment) are acked with one `basic.ack` with
//! `multiple` set, which RabbitMQ settles as one command, where the
//! channel's order allows: `multiple` acks every unsettled delivery up to
//! the tag, so only a run of finished deliveries from the oldest one still
//! open can share it. A finished delivery behind one still running is
//! acked on its own, at once, so it never holds a prefetch slot.
//!
//! One task per channel owns the bookkeeping; the consumer registers each
//! delivery as it takes it (in the channel's order), and each delivery's
//! task reports how it ended. Nothing waits on a timer: what has arrived
//! when the task wakes is settled together.

use std::collections::BTreeMap;

use lapin::{
    options::{BasicAckOptions, BasicNackOptions},
    Channel,
};
use tokio::{sync::mpsc, task::JoinHandle};

/// How a delivery ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Done with it (the job's state is in PostgreSQL).
    Ack,
    /// To the dead-letter queue (`nack`, no requeue).
    DeadLetter,
    /// Back on the queue, for this or another process (`nack`, requeue).
    Requeue,
}

/// One frame to send: `multiple` only ever with [`Settle::Ack`].
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    pub tag: u64,
    pub how: Settle,
    pub multiple: bool,
}

enum Note {
    Delivered(u64),
    Settled(u64, Settle),
}

/// The settling task of one channel.
pub struct Settler {
    tx: mpsc::UnboundedSender<Note>,
    task: JoinHandle<()>,
}

impl Settler {
    pub fn new(channel: Channel) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(channel, rx));
        Self { tx, task }
    }

    /// A handle for the tasks that end deliveries.
    pub fn handle(&self) -> SettleHandle {
        SettleHandle(self.tx.clone())
    }

    /// Registers a delivery as taken from the consumer; in the channel's
    /// order, before anything settles it.
    pub fn delivered(&self, tag: u64) {
        let _ = self.tx.send(Note::Delivered(tag));
    }

    /// Sends what is left once every handle is gone.
    pub async fn close(self) {
        drop(self.tx);
        let _ = self.task.await;
    }
}

/// Ends deliveries of one channel.
#[derive(Clone)]
pub struct SettleHandle(mpsc::UnboundedSender<Note>);

impl SettleHandle {
    pub fn settle(&self, tag: u64, how: Settle) {
        let _ = self.0.send(Note::Settled(tag, how));
    }
}

async fn run(channel: Channel, mut rx: mpsc::UnboundedReceiver<Note>) {
    // Deliveries not yet settled on the broker, by tag; `Some` once ended.
    let mut open: BTreeMap<u64, Option<Settle>> = BTreeMap::new();
    while let Some(first) = rx.recv().await {
        note(&mut open, first);
        while let Ok(next) = rx.try_recv() {
            note(&mut open, next);
        }
        for frame in plan(&mut open) {
            send(&channel, frame).await;
        }
    }
}

fn note(open: &mut BTreeMap<u64, Option<Settle>>, note: Note) {
    match note {
        Note::Delivered(tag) => {
            open.insert(tag, None);
        }
        Note::Settled(tag, how) => {
            open.insert(tag, Some(how));
        }
    }
}

/// The frames that settle every ended delivery in `open`, removing them:
/// nacks one by one, then the run of acks from the oldest open delivery as
/// one `multiple` ack, then the acks behind a delivery still running one
/// by one.
pub fn plan(open: &mut BTreeMap<u64, Option<Settle>>) -> Vec<Frame> {
    let mut frames = Vec::new();
    open.retain(|&tag, how| match *how {
        Some(how @ (Settle::DeadLetter | Settle::Requeue)) => {
            frames.push(Frame {
                tag,
                how,
                multiple: false,
            });
            false
        }
        _ => true,
    });
    let run: Vec<u64> = open
        .iter()
        .take_while(|(_, how)| **how == Some(Settle::Ack))
        .map(|(&tag, _)| tag)
        .collect();
    if let Some(&last) = run.last() {
        frames.push(Frame {
            tag: last,
            how: Settle::Ack,
            multiple: run.len() > 1,
        });
        for tag in &run {
            open.remove(tag);
        }
    }
    open.retain(|&tag, how| {
        if *how == Some(Settle::Ack) {
            frames.push(Frame {
                tag,
                how: Settle::Ack,
                multiple: false,
            });
            false
        } else {
            true
        }
    });
    frames
}

async fn send(channel: &Channel, frame: Frame) {
    let Frame { tag, how, multiple } = frame;
    let sent = match how {
        Settle::Ack => channel.basic_ack(tag, BasicAckOptions { multiple }).await,
        Settle::DeadLetter | Settle::Requeue => {
            channel
                .basic_nack(
                    tag,
                    BasicNackOptions {
                        multiple: false,
                        requeue: how == Settle::Requeue,
                    },
                )
                .await
        }
    };
    if let Err(e) = sent {
        // The channel is gone; the broker redelivers, the claim makes that harmless.
        tracing::warn!(tag, ?how, error = %e, "could not settle a delivery");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(entries: &[(u64, Option<Settle>)]) -> BTreeMap<u64, Option<Settle>> {
        entries.iter().copied().collect()
    }

    fn ack(tag: u64, multiple: bool) -> Frame {
        Frame {
            tag,
            how: Settle::Ack,
            multiple,
        }
    }

    #[test]
    fn finished_deliveries_from_the_oldest_share_one_ack() {
        let mut o = open(&[
            (1, Some(Settle::Ack)),
            (2, Some(Settle::Ack)),
            (3, Some(Settle::Ack)),
            (4, None),
        ]);
        assert_eq!(plan(&mut o), vec![ack(3, true)]);
        assert_eq!(o, open(&[(4, None)]));
    }

    #[test]
    fn a_running_delivery_is_never_covered_by_a_multiple_ack() {
        let mut o = open(&[
            (1, Some(Settle::Ack)),
            (2, None),
            (3, Some(Settle::Ack)),
            (4, Some(Settle::Ack)),
        ]);
        // 1 alone; 3 and 4 are behind 2, which still runs: one by one.
        assert_eq!(
            plan(&mut o),
            vec![ack(1, false), ack(3, false), ack(4, false)]
        );
        assert_eq!(o, open(&[(2, None)]));
        // When 2 ends, it is acked alone (nothing older is open).
        o.insert(2, Some(Settle::Ack));
        assert_eq!(plan(&mut o), vec![ack(2, false)]);
        assert!(o.is_empty());
    }

    #[test]
    fn nacks_go_first_and_do_not_break_a_run_of_acks() {
        let mut o = open(&[
            (5, Some(Settle::Ack)),
            (6, Some(Settle::Requeue)),
            (7, Some(Settle::Ack)),
            (8, Some(Settle::DeadLetter)),
            (9, None),
        ]);
        assert_eq!(
            plan(&mut o),
            vec![
                Frame {
                    tag: 6,
                    how: Settle::Requeue,
                    multiple: false
                },
                Frame {
                    tag: 8,
                    how: Settle::DeadLetter,
                    multiple: false
                },
                // 6 is settled by its nack before this frame, so 5 and 7 share it.
                ack(7, true),
            ]
        );
        assert_eq!(o, open(&[(9, None)]));
    }

    #[test]
    fn nothing_ended_sends_nothing() {
        let mut o = open(&[(1, None), (2, None)]);
        assert!(plan(&mut o).is_empty());
        assert_eq!(o.len(), 2);
    }
}
