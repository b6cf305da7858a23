import Synchronization

/// Which vBuckets may have work for the flusher (queued items or a changed state row): one bit each, set by the
/// write path after it queued something (`EngineCore.apply`, `EngineCore.stateRowChanged`) and taken by the
/// flusher before it locks a vBucket, so `Flusher.take` visits only those instead of all 1,024 locks per batch.
///
/// A bit is a hint that never loses work: it is set after the work was queued under the vBucket's lock, and the
/// flusher clears it before it takes that lock, so either the flusher sees the work or the bit is set again for
/// its next batch. A stale bit (work already taken) costs one visit that finds nothing.
final class DirtyVBuckets: @unchecked Sendable {
    let count: Int
    private let wordCount: Int
    private let words: UnsafeMutablePointer<Atomic<UInt64>>
    /// The words `takeAll` cleared, read by the flusher thread only.
    private var snapshot: [UInt64]

    init(count: Int) {
        self.count = count
        self.wordCount = (count + 63) / 64
        snapshot = [UInt64](repeating: 0, count: wordCount)
        words = .allocate(capacity: wordCount)
        for w in 0..<wordCount { (words + w).initialize(to: Atomic(0)) }
    }

    deinit {
        words.deinitialize(count: wordCount)
        words.deallocate()
    }

    /// Marks `index` (out of range: ignored). Cheap when already marked: a load, no store to a shared line.
    @inline(__always)
    func mark(_ index: Int) {
        guard index >= 0 && index < count else { return }
        let bit = UInt64(1) << UInt64(index & 63)
        let word = words + (index >> 6)
        if word.pointee.load(ordering: .relaxed) & bit == 0 {
            word.pointee.bitwiseOr(bit, ordering: .sequentiallyConsistent)
        }
    }

    func isMarked(_ index: Int) -> Bool {
        guard index >= 0 && index < count else { return false }
        return words[index >> 6].load(ordering: .sequentiallyConsistent) & (UInt64(1) << UInt64(index & 63)) != 0
    }

    /// Clears every bit and returns the marked vBuckets in round-robin order from `start`, written into `out`
    /// (kept by the caller, so its buffer is reused). One consumer only (the flusher thread): it uses `snapshot`.
    func takeAll(startingAt start: Int, into out: inout [Int]) {
        out.removeAll(keepingCapacity: true)
        guard count > 0 else { return }
        for w in 0..<wordCount { snapshot[w] = words[w].exchange(0, ordering: .sequentiallyConsistent) }
        let first = ((start % count) + count) % count
        append(from: first, to: count, into: &out)
        append(from: 0, to: first, into: &out)
    }

    /// The bits of `snapshot` in [lower, upper), in order.
    private func append(from lower: Int, to upper: Int, into out: inout [Int]) {
        guard lower < upper else { return }
        for w in (lower >> 6)...((upper - 1) >> 6) {
            var bits = snapshot[w]
            let base = w << 6
            if base < lower { bits &= ~UInt64(0) << UInt64(lower - base) }
            if base + 64 > upper { bits &= (UInt64(1) << UInt64(upper - base)) &- 1 }
            while bits != 0 {
                out.append(base + bits.trailingZeroBitCount)
                bits &= bits &- 1
            }
        }
    }
}
