import Logging
import SetteeCore
import Synchronization

/// The allocator's state in a database: the pure `SequenceAllocator` and the writers waiting for its increment.
struct SequenceState: Sendable {
    var allocator = SequenceAllocator.configured()
    var waiters: [CheckedContinuation<Void, Never>] = []
}

extension GatewayDatabase {
    /// The next gateway sequence: from this gateway's reserved batch, or a new batch reserved with one increment of
    /// the bucket's counter (shared by every gateway; docs/adr/0045-gateway-sequence-batches.md).
    func allocateSequence() async throws(GatewayError) -> UInt64 {
        // A keyspace of a database over several collections: the database's one allocator (ADR 0142).
        if let owner = options.links?.sequenceOwner, owner !== self { return try await owner.allocateSequence() }
        while true {
            let now = Self.uptime()
            switch sequenceState.withLock({ $0.allocator.take(now: now) }) {
            case .sequence(let seq):
                return seq
            case .wait:
                await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                    let parked = sequenceState.withLock { st -> Bool in
                        guard st.allocator.reserving else { return false }
                        st.waiters.append(c)
                        return true
                    }
                    if !parked { c.resume() }
                }
            case .reserve(var count):
                let bucket = self.bucket
                while true {
                    let top: UInt64
                    do {
                        top = try await bucketCall { () async throws(GatewayBucketError) in
                            try await bucket.increment(seqKey, delta: count, initial: count)
                        }
                    } catch {
                        let waiting = sequenceState.withLock { st in
                            st.allocator.reserveFailed()
                            defer { st.waiters = [] }
                            return st.waiters
                        }
                        for w in waiting { w.resume() }
                        throw error
                    }
                    let (answer, waiting) = sequenceState.withLock { st in
                        let answer = st.allocator.reserved(through: top, count: count, now: Self.uptime())
                        guard case .sequence = answer else { return (answer, [CheckedContinuation<Void, Never>]()) }
                        defer { st.waiters = [] }
                        return (answer, st.waiters)
                    }
                    switch answer {
                    case .reserveMore(let more):
                        // The counter was reset below this gateway's sequences: increment again, past them.
                        count = more
                    case .sequence(let seq):
                        for w in waiting { w.resume() }
                        armSequenceRelease()
                        return seq
                    }
                }
            }
        }
    }

    /// Records an allocated sequence that will never carry a write, so every gateway can close the gap.
    func releaseSequence(_ seq: UInt64) async {
        await releaseSequences(seq...seq)
    }

    /// Records allocated sequences that will never carry a write (one marker: `_sync:unusedSeq:<n>` for one,
    /// `_sync:unusedSeqs:<from>:<to>` for more) and closes the gap in this gateway's index at once.
    func releaseSequences(_ range: ClosedRange<UInt64>) async {
        do {
            _ = try await bucket.insert(
                SequenceAllocator.markerKey(range), value: Array("{}".utf8),
                expiry: Limits.gatewayUnusedSequenceMarkerSeconds)
        } catch {
            logger.warning(
                "could not record unused sequences",
                metadata: ["from": "\(range.lowerBound)", "to": "\(range.upperBound)", "error": "\(error)"])
        }
        seeUnused(range)
        shareSequences(Array(range))
    }

    /// Sequences another gateway (or this one) recorded as unused: the index stops waiting for them.
    func seeUnused(_ range: ClosedRange<UInt64>) {
        let change = index.withLock { idx -> IndexChange in
            var c = IndexChange()
            c.stableMoved = idx.seeSequences(Array(range))
            return c
        }
        notify(change)
    }

    /// Starts the timer that releases what a reserved batch still holds `gatewaySequenceReleaseWaitSeconds` after
    /// its reserve (one timer per database; it stops when nothing reserved is unused).
    func armSequenceRelease() {
        guard !sequenceReleaseTimer.exchange(true, ordering: .acquiringAndReleasing) else { return }
        Task { [weak self] in
            while true {
                guard let self else { return }
                let now = Self.uptime()
                switch self.sequenceState.withLock({ $0.allocator.releaseDue(now: now) }) {
                case .release(let range):
                    await self.releaseSequences(range)
                case .later(let at):
                    try? await Task.sleep(for: .nanoseconds(Swift.max(at &- now, 1_000_000)))
                case .none:
                    self.sequenceReleaseTimer.store(false, ordering: .releasing)
                    // A reserve may have happened between the check and the store.
                    if self.sequenceState.withLock({ $0.allocator.available > 0 }) { self.armSequenceRelease() }
                    return
                }
            }
        }
    }

    /// Releases every reserved, unused sequence (the database closes), so other gateways need not wait for them.
    func releaseReservedSequences() async {
        guard let range = sequenceState.withLock({ $0.allocator.releaseAll() }) else { return }
        await releaseSequences(range)
    }
}
