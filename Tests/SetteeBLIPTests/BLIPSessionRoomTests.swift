import SetteeCore
import Synchronization
import Testing

@testable import SetteeBLIP

/// Flow control's waiting line (`BLIPSession.waitForRoom`): senders wait while the out-box is full.
@Suite struct BLIPSessionRoomTests {
    @Test func aSendCancelledWhileWaitingForRoomThrowsAndLeavesTheOutboxAsItWas() async throws {
        // Proves a sender waiting for out-box room stops waiting when its task is cancelled: it throws
        // CancellationError while the room never comes (the peer never ACKs), leaves the line (no continuation
        // kept) and the out-box's queued bytes are what they were before it came.
        var configuration = BLIPConnection.Configuration()
        configuration.frameBytes = 512
        configuration.maxUnackedBytes = 1  // one frame, then the message waits for an ACK that never comes
        configuration.maxQueuedOutgoingBytes = 4096
        let (inbound, peer) = AsyncStream<[UInt8]>.makeStream()  // the peer: connected, silent
        let (written, wrote) = AsyncStream<Int>.makeStream()
        let session = BLIPSession(handler: NoHandler(), configuration: configuration) { frame in
            wrote.yield(frame.count)
        }
        let running = Task { await session.run(inbound: inbound) }

        _ = try await session.send(BLIPMessage(noReply: true, body: Array(repeating: 7, count: 10_000)))
        var frames = written.makeAsyncIterator()
        #expect(await frames.next() != nil)  // its first frame went; the rest waits for the ACK
        let before = await session.queuedOutgoingBytes
        #expect(before > configuration.maxQueuedOutgoingBytes)

        let waiting = Task { try await session.send(BLIPMessage(noReply: true, body: [1, 2, 3])) }
        var turns = 0
        while await session.sendersWaitingForRoom == 0, turns < 100_000 {
            await Task.yield()
            turns += 1
        }
        #expect(await session.sendersWaitingForRoom == 1)
        waiting.cancel()
        await #expect(throws: CancellationError.self) { try await waiting.value }
        #expect(await session.sendersWaitingForRoom == 0)
        #expect(await session.queuedOutgoingBytes == before)

        // A send already cancelled when it would wait throws without joining the line.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await session.send(BLIPMessage(noReply: true, body: [4]))
        }
        await #expect(throws: CancellationError.self) { try await early.value }
        #expect(await session.sendersWaitingForRoom == 0)
        #expect(await session.queuedOutgoingBytes == before)

        await session.close()
        peer.finish()
        wrote.finish()
        _ = await running.value
    }

    @Test func cancellingTheHeadOfTheLineLetsASmallerSenderBehindItIn() async throws {
        // Proves the line is not stuck behind a cancelled sender: a big message waiting at the head of the line holds
        // back a small one that would fit; cancelling the big one's task lets the small one be queued.
        var configuration = BLIPConnection.Configuration()
        configuration.frameBytes = 512
        configuration.maxUnackedBytes = 1
        configuration.maxQueuedOutgoingBytes = 12_000
        let (inbound, peer) = AsyncStream<[UInt8]>.makeStream()
        let (written, wrote) = AsyncStream<Int>.makeStream()
        let session = BLIPSession(handler: NoHandler(), configuration: configuration) { frame in
            wrote.yield(frame.count)
        }
        let running = Task { await session.run(inbound: inbound) }
        _ = try await session.send(BLIPMessage(noReply: true, body: Array(repeating: 7, count: 10_000)))
        var frames = written.makeAsyncIterator()
        #expect(await frames.next() != nil)
        let before = await session.queuedOutgoingBytes

        let big = Task { try await session.send(BLIPMessage(noReply: true, body: Array(repeating: 8, count: 5_000))) }
        var turns = 0
        while await session.sendersWaitingForRoom < 1, turns < 100_000 {
            await Task.yield()
            turns += 1
        }
        let small = Task { try await session.send(BLIPMessage(noReply: true, body: [9])) }
        turns = 0
        while await session.sendersWaitingForRoom < 2, turns < 100_000 {
            await Task.yield()
            turns += 1
        }
        #expect(await session.sendersWaitingForRoom == 2)  // the small one fits, but waits its turn
        big.cancel()
        await #expect(throws: CancellationError.self) { try await big.value }
        _ = try await small.value
        #expect(await session.sendersWaitingForRoom == 0)
        #expect(await frames.next() != nil)  // the small message's one frame went out
        #expect(await session.queuedOutgoingBytes == before)

        await session.close()
        peer.finish()
        wrote.finish()
        _ = await running.value
    }
}
