import NIOCore

/// Deferred flushes (ADR 0055). Responses that complete off the read path (durable writes released by their
/// replicas' acknowledgements or by a flusher batch, DCP batches back from the scan pool) arrive as separate
/// event-loop tasks, often many in one tick: one acknowledgement commits every prepare at or below its seqno, one
/// fsync releases every durable write of its batch. Flushing each on its own cost a `write(2)` per response; a
/// flush queued behind them sends them all in one.
extension KVConnectionHandler {
    /// Sends `out` once the event-loop tasks already queued have run (at most one flush queued at a time). On the
    /// connection's event loop.
    func flushSoon(context: ChannelHandlerContext) {
        guard !flushScheduled else { return }
        flushScheduled = true
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        context.eventLoop.execute {
            let h = handler.value
            h.flushScheduled = false
            guard let context = h.context else { return }
            h.flushOut(context: context)
        }
    }
}
