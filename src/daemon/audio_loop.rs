//! The audio thread: the microphone's frames through the [`Listener`], what it completes
//! out to the conversation task. It never waits on anything but the microphone, so the
//! wake word is heard even while a reply is being worked out or spoken; the
//! conversation task steers it only through [`Control`] messages.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::listener::{Command, Heard, Listener};
use super::systemd::Heartbeat;
use crate::audio::{Capture, CaptureStatus};

/// No frame for this long: the microphone has stopped delivering (its device is being
/// reopened), not merely delivered a large buffer late.
const MICROPHONE_SILENT: Duration = Duration::from_secs(1);

/// What the voice loop is told by the conversation task.
pub(super) enum Control {
    /// Listen for a command without the wake word, for this many milliseconds.
    Listen(u64),
    /// The same, over a ring ([`Listener::listen_over_ring`]).
    ListenOverRing(u64),
    /// Stop listening for a command; wait for the wake word.
    Cancel,
    /// The command paused at this stream position sounds finished.
    Finish(u64),
}

pub(super) struct AudioLoop {
    pub(super) capture: Capture,
    pub(super) listener: Listener,
    pub(super) heard: mpsc::UnboundedSender<(Heard, Instant)>,
    pub(super) paused: mpsc::UnboundedSender<Command>,
    pub(super) control: Receiver<Control>,
    pub(super) stop: CancellationToken,
    pub(super) beat: Heartbeat,
    pub(super) status: Arc<Mutex<CaptureStatus>>,
    /// Takes what the speaker plays out of each frame before the listener hears it.
    pub(super) echo: Option<super::echo::EchoStage>,
}

impl AudioLoop {
    pub(super) fn run(mut self) {
        let mut status_at = Instant::now();
        let mut last_frame = Instant::now();
        while !self.stop.is_cancelled() {
            self.beat.beat();
            while let Ok(control) = self.control.try_recv() {
                match control {
                    Control::Listen(ms) => self.listener.listen(ms),
                    Control::ListenOverRing(ms) => self.listener.listen_over_ring(ms),
                    Control::Cancel => self.listener.cancel(),
                    Control::Finish(end) => {
                        if let Some(heard) = self.listener.finish(end)
                            && self.heard.send((heard, Instant::now())).is_err()
                        {
                            return;
                        }
                    }
                }
            }
            match self
                .capture
                .frames()
                .recv_timeout(Duration::from_millis(100))
            {
                Ok(mut frame) => {
                    last_frame = Instant::now();
                    if let Some(echo) = &mut self.echo {
                        // Over a ring, "stop" must reach Whisper whole; the listener's
                        // bar keeps the echo the suppressor would have taken out.
                        echo.set_linear(self.listener.over_ring());
                        echo.process(&mut frame);
                        self.listener.set_over_echo(echo.over_echo());
                    }
                    if let Some(heard) = self.listener.push(&frame)
                        && self.heard.send((heard, Instant::now())).is_err()
                    {
                        return;
                    }
                    if let Some(paused) = self.listener.take_pause()
                        && self.paused.send(paused).is_err()
                    {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    // The speaker keeps playing while the microphone is reopened: what it
                    // plays meanwhile would otherwise pile up as the canceller's reference.
                    if let Some(echo) = &mut self.echo
                        && last_frame.elapsed() >= MICROPHONE_SILENT
                    {
                        echo.microphone_silent();
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if status_at.elapsed() >= Duration::from_millis(500) {
                status_at = Instant::now();
                *self.status.lock().unwrap_or_else(|e| e.into_inner()) = self.capture.status();
            }
        }
    }
}
