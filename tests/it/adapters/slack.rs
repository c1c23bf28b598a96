//! Slack through the fake: Socket Mode and the Events API, two bot accounts in one thread
//! (seed 001 appendix B), signatures and replays refused, reconnects.
