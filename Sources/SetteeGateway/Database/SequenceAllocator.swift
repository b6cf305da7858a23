import SetteeCore

/// Hands out gateway sequences from batches reserved with one increment of the bucket's `_sync:seq` counter, as
/// Sync Gateway's sequence allocator does (docs/adr/0045-gateway-sequence-batches.md): a batch starts at one
/// sequence, doubles whenever the next reserve comes sooner than `growInterval` after the last one (up to
/// `maxBatch`), and whatever a batch still holds `releaseWait` after its reserve is released, so every gateway's
/// index closes that gap; a release that found most of the batch unused shrinks the next one by what went unused.
/// Pure: the gateway performs the increment and the release marker the directives ask for; time is passed in.
///
/// States: idle (`last == max`, nothing reserved and unused), holding (`last < max`), reserving (an increment is
/// in flight; takers that find nothing wait for it).
/// Invariants: 1. `last <= max`; 2. sequences `last+1...max` are reserved by this gateway and handed to no one;
/// 3. `1 <= batchSize <= maxBatch`; 4. at most one increment is in flight (`reserving`).
///
///     idle/holding --take, nothing left--> reserving --reserved(through:)--> holding --all taken--> idle
///     holding --releaseDue, wait over--> idle (release last+1...max)
struct SequenceAllocator: Sendable, Equatable {
    /// What a writer does next.
    enum Take: Sendable, Equatable {
        /// Use this sequence.
        case sequence(UInt64)
        /// Increment `_sync:seq` by `count` (initial `count`), then call `reserved(through:count:now:)`.
        case reserve(count: UInt64)
        /// Another writer's increment is in flight: wait for it to end, then take again.
        case wait
    }

    /// What the writer that reserved does once its increment returned.
    enum Reserved: Sendable, Equatable {
        /// Use this sequence; the increment is over (waiting writers take again).
        case sequence(UInt64)
        /// Increment `_sync:seq` again by `count`, then call `reserved(through:count:now:)` again; the increment
        /// stays in flight.
        case reserveMore(count: UInt64)
    }

    /// What the release timer does next.
    enum Release: Sendable, Equatable {
        /// Nothing reserved is unused: the timer stops.
        case none
        /// Check again at this time (nanoseconds, the caller's clock).
        case later(at: Int64)
        /// Record these reserved sequences as unused (they will never carry a write).
        case release(ClosedRange<UInt64>)
    }

    private(set) var last: UInt64 = 0
    private(set) var max: UInt64 = 0
    private(set) var batchSize: UInt64 = 1
    private(set) var reserving = false
    private var lastReserve: Int64?
    let maxBatch: UInt64
    let growInterval: Int64
    let releaseWait: Int64

    /// `growInterval` and `releaseWait` in nanoseconds; `maxBatch` at least 1.
    init(maxBatch: UInt64, growInterval: Int64, releaseWait: Int64) {
        self.maxBatch = Swift.max(1, maxBatch)
        self.growInterval = growInterval
        self.releaseWait = releaseWait
    }

    /// The gateway's configured allocator (`Limits.gatewaySequence*`).
    static func configured() -> SequenceAllocator {
        SequenceAllocator(
            maxBatch: UInt64(Swift.max(1, Limits.gatewaySequenceBatchMax)),
            growInterval: Int64(Limits.gatewaySequenceGrowIntervalSeconds * 1e9),
            releaseWait: Int64(Limits.gatewaySequenceReleaseWaitSeconds * 1e9))
    }

    /// Sequences reserved and not yet handed out.
    var available: UInt64 { max - last }

    /// A writer asks for a sequence at `now`.
    mutating func take(now: Int64) -> Take {
        if last < max {
            last += 1
            return .sequence(last)
        }
        if reserving { return .wait }
        reserving = true
        // Reserving again sooner than the interval means the batch is too small for this write rate.
        if let t = lastReserve, now &- t < growInterval {
            batchSize = batchSize > maxBatch / 2 ? maxBatch : batchSize * 2
        }
        return .reserve(count: batchSize)
    }

    /// The increment asked for by `.reserve(count:)` returned `top` (the counter's new value): `top-count+1...top`
    /// is this gateway's, and the first of them above what it handed out goes to the writer that reserved
    /// (`.sequence`). Sequences other gateways took before are skipped (they are below `top-count+1`).
    /// When the counter is at or below this gateway's last sequence (an operator reset it), no sequence of the
    /// range is new: the answer is `.reserve(count:)` again, by enough to carry the counter past that last one, so
    /// every sequence this gateway hands out stays reserved in the shared counter and no other gateway can take it.
    /// The increment stays in flight (`reserving`) until a `.sequence` answer.
    mutating func reserved(through top: UInt64, count: UInt64, now: Int64) -> Reserved {
        lastReserve = now
        let first = top >= count ? top - count &+ 1 : 1
        // Never below what this gateway handed out already (a counter reset under it must not repeat a sequence).
        let start = Swift.max(first, 1, last &+ 1)
        guard start <= top else {
            // start - top >= 1 here; the next batch's worth on top (last + batchSize cannot pass UInt64.max:
            // sequences are counted from 1 by increments of at most maxBatch).
            let catchUp = start - top
            return .reserveMore(count: catchUp > UInt64.max - (batchSize - 1) ? catchUp : catchUp + (batchSize - 1))
        }
        reserving = false
        last = start
        max = top
        return .sequence(start)
    }

    /// The increment failed: the next taker reserves again.
    mutating func reserveFailed() {
        reserving = false
    }

    /// The release timer asks at `now` whether reserved sequences have waited long enough.
    mutating func releaseDue(now: Int64) -> Release {
        guard last < max, let t = lastReserve else { return .none }
        let due = t &+ releaseWait
        guard now >= due else { return .later(at: due) }
        return .release(releaseUnused())
    }

    /// Releases everything reserved and unused (the database closes); nil when nothing is.
    mutating func releaseAll() -> ClosedRange<UInt64>? {
        guard last < max else { return nil }
        return releaseUnused()
    }

    private mutating func releaseUnused() -> ClosedRange<UInt64> {
        let range = (last + 1)...max
        let unused = max - last
        // Nothing of the batch used: idle again. Some used: the next batch is smaller by what was left.
        batchSize = unused >= batchSize ? 1 : batchSize - unused
        last = max
        return range
    }

    /// The range an unused-sequences marker key names (`<from>:<to>` after `unusedSeqRangePrefix`), or nil when
    /// the key is malformed, the range empty or reversed, or longer than `maxBatch` (a gateway never reserves
    /// more at once, so a longer range is not one of ours and would cost unbounded work).
    static func parseRangeMarker(_ suffix: Substring, maxBatch: UInt64) -> ClosedRange<UInt64>? {
        let parts = suffix.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let from = UInt64(parts[0]), let to = UInt64(parts[1]), from >= 1, from <= to,
            to - from < maxBatch
        else { return nil }
        return from...to
    }

    /// The marker key recording `range` as unused: the one-sequence form for a single sequence (understood by
    /// every gateway version), the range form otherwise.
    static func markerKey(_ range: ClosedRange<UInt64>) -> String {
        if range.lowerBound == range.upperBound { return unusedSeqPrefix + String(range.lowerBound) }
        return unusedSeqRangePrefix + String(range.lowerBound) + ":" + String(range.upperBound)
    }
}
