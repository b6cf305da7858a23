import NIOCore
import SetteeCore
import Synchronization

/// The bucket's mutation stream split into lanes by vBucket, so a database handles (imports) the mutations of
/// different vBuckets at the same time while each vBucket's stay in stream order, as Sync Gateway's import feed does
/// (its DCP workers each own a set of vBuckets). Before, one task handled every mutation in turn, and an import's
/// round trips (the sync function, the CAS write) bounded the database's imports to one per round trip: a debug
/// gateway on a busy 2-core machine imported ~120-190 of the 250 SDK writes a second of issue 67's soak, its stream fell
/// tens of seconds behind, and its own writes then looked lost and were read again (ADR 0103).
///
/// Invariants:
/// 1. A vBucket's mutations (its restart markers included) go to one lane and are taken in the order they were put.
/// 2. A lane holds at most `depth` mutations; `put` waits for room, so a busy lane holds the stream back (the stream
///    is pull-driven: the producers wait too) instead of buffering without bound.
/// 3. After `finish`, `take` returns what is queued and then nil; after `cancel`, nil at once (queued ones dropped).
final class MutationLanes: Sendable {
    private struct Lane {
        var queue = CircularBuffer<BucketMutation>()
        /// The lane's worker, waiting for a mutation.
        var taker: CheckedContinuation<BucketMutation?, Never>?
    }

    private struct State {
        var lanes: [Lane]
        /// The dispatcher, waiting for room in a lane: which one, and how to wake it.
        var putter: (lane: Int, wake: CheckedContinuation<Void, Never>)?
        var finished = false
    }

    let count: Int
    let depth: Int
    private let state: Mutex<State>

    init(count: Int, depth: Int) {
        precondition(count > 0 && depth > 0, "mutation lanes: count \(count) and depth \(depth) must be positive")
        self.count = count
        self.depth = depth
        self.state = Mutex(State(lanes: Array(repeating: Lane(), count: count)))
    }

    /// The lane of a vBucket (invariant 1).
    func lane(of m: BucketMutation) -> Int { m.vbucket.index % count }

    /// Queues `m` on its lane, waiting while the lane is full (one caller: the stream's reader).
    func put(_ m: BucketMutation) async {
        let lane = lane(of: m)
        while true {
            enum Step {
                case handed(CheckedContinuation<BucketMutation?, Never>)
                case queued, dropped, full
            }
            let step = state.withLock { s -> Step in
                if s.finished { return .dropped }
                if let taker = s.lanes[lane].taker {
                    s.lanes[lane].taker = nil
                    return .handed(taker)
                }
                guard s.lanes[lane].queue.count < depth else { return .full }
                s.lanes[lane].queue.append(m)
                return .queued
            }
            switch step {
            case .handed(let taker):
                taker.resume(returning: m)
                return
            case .queued, .dropped:
                return
            case .full:
                await withCheckedContinuation { (wake: CheckedContinuation<Void, Never>) in
                    let now = state.withLock { s -> Bool in
                        if s.finished || s.lanes[lane].queue.count < depth { return true }
                        s.putter = (lane, wake)
                        return false
                    }
                    if now { wake.resume() }
                }
            }
        }
    }

    /// The next mutation of `lane`, waiting for one; nil once the lanes are finished and it is empty.
    func take(_ lane: Int) async -> BucketMutation? {
        if let ready = state.withLock({ Self.pop(lane, &$0) }) { return ready.resumingPutter() }
        return await withCheckedContinuation { (taker: CheckedContinuation<BucketMutation?, Never>) in
            let ready = state.withLock { s -> Popped? in
                // Queued, or finished, between the first look and this one.
                if let ready = Self.pop(lane, &s) { return ready }
                s.lanes[lane].taker = taker
                return nil
            }
            if let ready { taker.resume(returning: ready.resumingPutter()) }
        }
    }

    /// What `take` found: a mutation (nil: the lanes are finished) and the dispatcher to wake, now that the lane has room.
    private struct Popped {
        var mutation: BucketMutation?
        var putter: CheckedContinuation<Void, Never>?

        func resumingPutter() -> BucketMutation? {
            putter?.resume()
            return mutation
        }
    }

    /// The lane's first mutation, or the end; nil when the worker must wait.
    private static func pop(_ lane: Int, _ s: inout State) -> Popped? {
        guard let m = s.lanes[lane].queue.popFirst() else { return s.finished ? Popped(mutation: nil) : nil }
        guard let p = s.putter, p.lane == lane else { return Popped(mutation: m) }
        s.putter = nil
        return Popped(mutation: m, putter: p.wake)
    }

    /// No more mutations: each lane's worker takes what is queued, then nil (invariant 3).
    func finish() { end(dropping: false) }

    /// The database closes: the queued mutations are dropped and every worker gets nil at once.
    func cancel() { end(dropping: true) }

    private func end(dropping: Bool) {
        let (takers, putter) = state.withLock {
            s -> ([CheckedContinuation<BucketMutation?, Never>], CheckedContinuation<Void, Never>?) in
            s.finished = true
            var takers: [CheckedContinuation<BucketMutation?, Never>] = []
            for i in s.lanes.indices {
                if dropping { s.lanes[i].queue.removeAll() }
                if let t = s.lanes[i].taker {
                    takers.append(t)
                    s.lanes[i].taker = nil
                }
            }
            let putter = s.putter?.wake
            s.putter = nil
            return (takers, putter)
        }
        for t in takers { t.resume(returning: nil) }
        putter?.resume()
    }
}
