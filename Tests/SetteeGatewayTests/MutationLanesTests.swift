import SetteeCore
import Synchronization
import Testing

@testable import SetteeGateway

/// `MutationLanes`, the split of a database's mutation stream by vBucket: each vBucket's mutations reach its lane's
/// worker in stream order while other lanes go on, a full lane holds the stream's reader back, `finish` lets the
/// workers drain and `cancel` stops them at once.
@Suite struct MutationLanesTests {
    /// What each vBucket's worker saw, in order.
    final class Seen: Sendable {
        let orders = Mutex<[UInt16: [Int]]>([:])
    }

    static func mutation(_ vb: UInt16, _ n: Int) -> BucketMutation {
        BucketMutation(
            key: "k\(vb)-\(n)", value: [], cas: CAS(UInt64(n + 1)), deleted: false, vbucket: VBucketID(vb),
            seqno: SeqNo(UInt64(n + 1)))
    }

    @Test func eachVBucketArrivesInOrderOnItsLaneAndAllArrive() async {
        // Proves invariant 1 and that nothing is lost: 64 vBuckets x 50 mutations through 8 lanes of depth 2, workers
        // slower than the reader; each worker sees its vBuckets' mutations in the order they were put.
        let lanes = MutationLanes(count: 8, depth: 2)
        let seen = Seen()
        await withTaskGroup(of: Void.self) { group in
            for lane in 0..<lanes.count {
                group.addTask {
                    while let m = await lanes.take(lane) {
                        #expect(lanes.lane(of: m) == lane)
                        let n = Int(m.seqno.rawValue) - 1
                        seen.orders.withLock { $0[m.vbucket.rawValue, default: []].append(n) }
                        if n % 7 == 0 { await Task.yield() }
                    }
                }
            }
            for n in 0..<50 {
                for vb in UInt16(0)..<64 { await lanes.put(Self.mutation(vb, n)) }
            }
            lanes.finish()
        }
        let all = seen.orders.withLock { $0 }
        #expect(all.count == 64)
        for (vb, ns) in all { #expect(ns == Array(0..<50), "vBucket \(vb): \(ns.prefix(10))") }
    }

    @Test func aFullLaneHoldsTheReaderBackAndOtherLanesGoOn() async throws {
        // Proves invariant 2: with lane 0's worker stopped, the reader puts `depth` mutations of lane 0 and then waits;
        // lane 1's worker, meanwhile, gets what was put before. Taking one of lane 0's lets the reader go on.
        let lanes = MutationLanes(count: 2, depth: 2)
        await lanes.put(Self.mutation(1, 0))
        let odd = await lanes.take(1)
        #expect(odd?.vbucket == VBucketID(1))
        let putCount = Atomic<Int>(0)
        let reader = Task {
            for n in 0..<3 {
                await lanes.put(Self.mutation(0, n))
                putCount.add(1, ordering: .relaxed)
            }
        }
        for _ in 0..<200 where putCount.load(ordering: .relaxed) < 2 { try await Task.sleep(for: .milliseconds(5)) }
        try await Task.sleep(for: .milliseconds(50))
        #expect(putCount.load(ordering: .relaxed) == 2, "the third put must wait for room in lane 0")
        #expect(await lanes.take(0)?.seqno == SeqNo(1))
        await reader.value
        #expect(putCount.load(ordering: .relaxed) == 3)
        #expect(await lanes.take(0)?.seqno == SeqNo(2))
        #expect(await lanes.take(0)?.seqno == SeqNo(3))
    }

    @Test func finishDrainsAndCancelDrops() async {
        // Proves invariant 3: after `finish` a worker gets what is queued and then nil; after `cancel`, nil at once,
        // and a worker already waiting is woken with nil.
        let drained = MutationLanes(count: 1, depth: 4)
        await drained.put(Self.mutation(0, 0))
        await drained.put(Self.mutation(0, 1))
        drained.finish()
        #expect(await drained.take(0)?.seqno == SeqNo(1))
        #expect(await drained.take(0)?.seqno == SeqNo(2))
        #expect(await drained.take(0) == nil)

        let dropped = MutationLanes(count: 2, depth: 4)
        await dropped.put(Self.mutation(0, 0))
        let waiting = Task { await dropped.take(1) }
        try? await Task.sleep(for: .milliseconds(20))
        dropped.cancel()
        #expect(await waiting.value == nil)
        #expect(await dropped.take(0) == nil)
        await dropped.put(Self.mutation(0, 1))
        #expect(await dropped.take(0) == nil)
    }
}
