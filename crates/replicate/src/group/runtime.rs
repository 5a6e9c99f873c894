//! The async runtime the Raft library runs on: tokio, with the one
//! difference that the random numbers it draws (its election timeouts)
//! come from a generator this crate can seed. A server seeds it from the
//! system's entropy; the group's simulation (`tests/simulation.rs`) seeds
//! it from the run's seed, so that a run replays exactly.

use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use openraft::async_runtime::TokioOneShotSender;
use openraft::{AsyncRuntime, OptionalSend, TokioInstant};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

thread_local! {
    static RNG: RefCell<Option<Rc<RefCell<StdRng>>>> = const { RefCell::new(None) };
}

/// Seeds the generator the Raft library draws from on this thread. A
/// thread never seeded draws from one seeded by the system.
pub fn seed_thread_rng(seed: u64) {
    RNG.with(|r| *r.borrow_mut() = Some(Rc::new(RefCell::new(StdRng::seed_from_u64(seed)))));
}

/// This thread's generator (see [`seed_thread_rng`]).
#[derive(Clone)]
pub struct ThreadRng(Rc<RefCell<StdRng>>);

fn thread_rng() -> ThreadRng {
    RNG.with(|r| {
        ThreadRng(
            r.borrow_mut()
                .get_or_insert_with(|| Rc::new(RefCell::new(StdRng::from_entropy())))
                .clone(),
        )
    })
}

impl RngCore for ThreadRng {
    fn next_u32(&mut self) -> u32 {
        self.0.borrow_mut().next_u32()
    }
    fn next_u64(&mut self) -> u64 {
        self.0.borrow_mut().next_u64()
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        self.0.borrow_mut().fill_bytes(dest)
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.0.borrow_mut().try_fill_bytes(dest)
    }
}

/// Tokio, with [`ThreadRng`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Runtime;

impl AsyncRuntime for Runtime {
    type JoinError = tokio::task::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = tokio::task::JoinHandle<T>;
    type Sleep = tokio::time::Sleep;
    type Instant = TokioInstant;
    type TimeoutError = tokio::time::error::Elapsed;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = tokio::time::Timeout<T>;
    type ThreadLocalRng = ThreadRng;
    type OneshotSender<T: OptionalSend> = TokioOneShotSender<T>;
    type OneshotReceiver<T: OptionalSend> = tokio::sync::oneshot::Receiver<T>;
    type OneshotReceiverError = tokio::sync::oneshot::error::RecvError;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        tokio::task::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        tokio::time::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        tokio::time::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        tokio::time::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        tokio::time::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        join_error.is_panic()
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        thread_rng()
    }

    fn oneshot<T>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>)
    where
        T: OptionalSend,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (TokioOneShotSender(tx), rx)
    }
}

/// Runs blocking `f` from async code: on a runtime of several threads, on
/// this one while the others take its tasks; on a runtime of one thread
/// (the simulation's), simply here.
pub fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}
