import SetteeCore
import SetteeStreams
import Testing

/// A producer's vBucket for simulation: change `i` has seqno `i + 1`; disk holds the deduplicated state up to
/// `persisted`, memory holds every change from `memoryLow` on.
struct ModelProducer {
    var changes: [StreamItem]
    var persisted: Int
    var memoryLow: Int
    var log: FailoverLog
    var purge: Int = 0

    var high: Int { changes.count }
    var history: ProducerHistory {
        ProducerHistory(failoverLog: log, highSeqno: SeqNo(UInt64(high)), purgeSeqno: SeqNo(UInt64(purge)))
    }

    func state(at seqno: Int) -> [[UInt8]: [UInt8]] {
        var state: [[UInt8]: [UInt8]] = [:]
        for change in changes.prefix(seqno) { apply(change, to: &state) }
        return state
    }

    func items(for marker: SnapshotMarker) -> [StreamItem] {
        let range = Int(marker.start.rawValue)...Int(marker.end.rawValue)
        switch marker.source {
        case .memory:
            return changes.filter { range.contains(Int($0.seqno.rawValue)) }
        case .disk:
            // Deduplicated: only each key's latest change on disk, in seqno order.
            var latest: [[UInt8]: StreamItem] = [:]
            for change in changes.prefix(persisted) { latest[change.key] = change }
            return latest.values.filter { range.contains(Int($0.seqno.rawValue)) }.sorted { $0.seqno < $1.seqno }
        }
    }
}

/// Which snapshot the model producer sends next on an accepted stream: a disk snapshot (deduplicated, up to
/// `persisted`) while the next seqno is no longer in memory, memory snapshots after that, then wait at the high
/// seqno or end at the requested end. Snapshots are contiguous, so the consumer meets every marker rule. (The
/// real producer scans the change feed instead: `KVConnectionHandler+DCP.swift`.)
struct ModelCursor {
    enum Step: Equatable {
        case send(SnapshotMarker)
        case wait
        case end
    }

    let end: SeqNo
    var sentThrough: SeqNo

    init(accepted request: StreamRequest) {
        end = request.end
        sentThrough = request.start
    }

    mutating func next(_ producer: ModelProducer) -> Step {
        if sentThrough >= end { return .end }
        let high = SeqNo(UInt64(producer.high))
        if sentThrough >= high { return .wait }
        let from = sentThrough.next
        let marker =
            from < SeqNo(UInt64(producer.memoryLow))
            ? SnapshotMarker(start: from, end: min(SeqNo(UInt64(producer.persisted)), end), source: .disk)
            : SnapshotMarker(start: from, end: min(high, end), source: .memory)
        sentThrough = marker.end
        return .send(marker)
    }
}

func apply(_ item: StreamItem, to state: inout [[UInt8]: [UInt8]]) {
    if item.kind == .mutation { state[item.key] = item.value } else { state[item.key] = nil }
}

/// A replica for simulation: applies directives, keeping the state at every committed snapshot.
struct ModelReplica {
    var visible: [[UInt8]: [UInt8]] = [:]
    var staged: [StreamItem] = []
    var resume: ResumePoint = .empty
    var log: FailoverLog? = nil
    var commits: [(seqno: SeqNo, state: [[UInt8]: [UInt8]])] = [(.zero, [:])]
    var commitCount = 0
}

/// Random changes over a few keys (so deduplication matters), deletions included.
func randomChanges(_ count: Int, from: Int = 0, tag: String, _ rng: inout SplitMix64) -> [StreamItem] {
    (0..<count).map { i in
        let seqno = UInt64(from + i + 1)
        let k = "k\(Int.random(in: 0..<8, using: &rng))"
        return Int.random(in: 0..<5, using: &rng) == 0
            ? StreamItem(kind: .deletion, seqno: SeqNo(seqno), key: key(k))
            : mutation(seqno, k, "\(tag)\(seqno)")
    }
}

/// Runs streams from `replica` against `producer` until the replica has everything, dropping the connection at
/// random. Checks at every commit that the replica's visible state is exactly the producer's state at the commit
/// point. Returns the number of stream attempts.
@discardableResult
func synchronise(
    _ replica: inout ModelReplica, with producer: ModelProducer, dropChance: Int, _ rng: inout SplitMix64,
    seed: UInt64
) -> Int {
    var attempts = 0
    while replica.resume.start.rawValue < UInt64(producer.high) || attempts == 0 {
        attempts += 1
        precondition(attempts < 1000, "seed \(seed): no progress")
        var consumer = StreamConsumer(vbucket: VBucketID(1), resume: replica.resume, failoverLog: replica.log)
        var pending = consumer.start()
        var cursor: ModelCursor? = nil
        streaming: while true {
            // Interpret directives (the shell's job).
            var request: StreamRequest? = nil
            for directive in pending {
                switch directive {
                case .sendRequest(let r): request = r
                case .persistFailoverLog(let log): replica.log = log
                case .persistResumePoint(let resume): replica.resume = resume
                case .rollBack(let target):
                    // Storage can only return to a committed snapshot point at or below the target.
                    let point = replica.commits.last { $0.seqno <= target }!
                    replica.commits.removeAll { $0.seqno > point.seqno }
                    replica.visible = point.state
                    pending = consumer.rolledBack(to: point.seqno)
                    continue streaming
                case .stage(let item): replica.staged.append(item)
                case .commitSnapshot(let marker, let resume):
                    for item in replica.staged { apply(item, to: &replica.visible) }
                    replica.staged = []
                    replica.resume = resume
                    replica.commitCount += 1
                    replica.commits.append((resume.start, replica.visible))
                    #expect(
                        replica.visible == producer.state(at: Int(marker.end.rawValue)),
                        "seed \(seed): visible state differs from the producer's at \(marker)")
                case .discardStaged: replica.staged = []
                case .close(let violation):
                    Issue.record("seed \(seed): violation \(violation)")
                    return attempts
                case .finished: break streaming
                }
            }
            pending = []
            if let request {
                switch producer.history.decide(request) {
                case .accept:
                    pending = consumer.accepted(producerLog: producer.log)
                    cursor = ModelCursor(accepted: request)
                case .rollback(let to): pending = consumer.rollbackRequested(to: to)
                case .invalidRange:
                    Issue.record("seed \(seed): invalid range \(request)")
                    return attempts
                }
                continue
            }
            guard var c = cursor else { break }
            let step = c.next(producer)
            cursor = c
            switch step {
            case .wait: pending = consumer.streamEnd(.closed)
            case .end: pending = consumer.streamEnd(.reachedEnd)
            case .send(let marker):
                pending = consumer.snapshotMarker(marker)
                for item in producer.items(for: marker) {
                    if Int.random(in: 0..<100, using: &rng) < dropChance {
                        pending += consumer.streamEnd(.disconnected)
                        break
                    }
                    pending += consumer.item(item)
                }
            }
        }
        #expect(replica.staged.isEmpty, "seed \(seed): staged items left after the stream ended")
    }
    return attempts
}

@Suite struct StreamSimulationTests {
    /// Proves, over 200 seeded histories split between disk and memory with random connection drops, that the
    /// consumer commits only whole snapshots (its visible state always equals the producer's at a snapshot end)
    /// and always converges to the producer's full state by resuming from its persisted point.
    @Test func replicaConvergesDespiteDrops() {
        for seed in UInt64(1)...200 {
            var rng = SplitMix64(seed: seed)
            let high = Int.random(in: 0...60, using: &rng)
            let persisted = Int.random(in: 0...high, using: &rng)
            let producer = ModelProducer(
                changes: randomChanges(high, tag: "v", &rng), persisted: persisted,
                memoryLow: Int.random(in: 1...(persisted + 1), using: &rng),
                log: FailoverLog(initialUUID: VBucketUUID(seed)))
            var replica = ModelReplica()
            synchronise(&replica, with: producer, dropChance: 3, &rng, seed: seed)
            #expect(replica.visible == producer.state(at: high), "seed \(seed)")
            #expect(replica.resume.start == SeqNo(UInt64(high)), "seed \(seed)")
        }
    }

    /// Proves the failover path end to end: a replica that followed the old active past the point where a
    /// promoted replica took over rolls back to the branch point and ends with exactly the new active's state.
    @Test func replicaRollsBackAfterFailover() {
        for seed in UInt64(1)...50 {
            var rng = SplitMix64(seed: seed)
            let common = randomChanges(Int.random(in: 1...30, using: &rng), tag: "c", &rng)
            let oldTail = randomChanges(Int.random(in: 1...20, using: &rng), from: common.count, tag: "old", &rng)
            let newTail = randomChanges(Int.random(in: 1...20, using: &rng), from: common.count, tag: "new", &rng)
            let oldLog = FailoverLog(initialUUID: VBucketUUID(0xA))
            let old = ModelProducer(
                changes: common + oldTail, persisted: common.count + oldTail.count, memoryLow: 1, log: oldLog)
            var replica = ModelReplica()
            // Follow the old active in two steps, so a committed point sits exactly at the branch point.
            var oldPrefix = old
            oldPrefix.changes = common
            oldPrefix.persisted = common.count
            synchronise(&replica, with: oldPrefix, dropChance: 0, &rng, seed: seed)
            synchronise(&replica, with: old, dropChance: 0, &rng, seed: seed)
            #expect(replica.resume.uuid == VBucketUUID(0xA))
            #expect(replica.resume.start == SeqNo(UInt64(old.high)))

            // The promoted copy had only the common prefix; it starts history 0xB there.
            var newLog = oldLog
            newLog.add(uuid: VBucketUUID(0xB), at: SeqNo(UInt64(common.count)))
            let promoted = ModelProducer(
                changes: common + newTail, persisted: common.count, memoryLow: 1, log: newLog)
            let before = replica.commitCount
            synchronise(&replica, with: promoted, dropChance: 5, &rng, seed: seed)
            #expect(replica.visible == promoted.state(at: promoted.high), "seed \(seed)")
            #expect(replica.log == newLog, "seed \(seed)")
            #expect(replica.commits.allSatisfy { $0.seqno.rawValue <= UInt64(promoted.high) }, "seed \(seed)")
            #expect(replica.commitCount > before, "seed \(seed)")
            // It rolled back only to the branch point, not to zero: the common prefix was kept.
            #expect(replica.commits.contains { $0.seqno == SeqNo(UInt64(common.count)) }, "seed \(seed)")
            #expect(replica.commits.first { $0.seqno > .zero }?.seqno == SeqNo(UInt64(common.count)), "seed \(seed)")
        }
    }
}
