import Foundation
import NIOCore
import NIOEmbedded
import NIOPosix
import SetteeClusterMap
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import SetteeStorage
import Synchronization
import Testing

@testable import SetteeNode

/// The KV connection handler driven in-process through NIO's testing channel: no sockets, and time only
/// moves when a test advances it. These check the handler's own rules (answer order, partial frames,
/// backpressure, the stranger's limits and deadline) with bytes written straight into the pipeline.
@Suite(.serialized) struct KVHandlerChannelTests {
    /// A registry with one bucket (`ramQuotaMB` of memory) and a KV node over it; `open` makes the bucket
    /// `authType=none`.
    final class Fixture: @unchecked Sendable {
        let dir = NSTemporaryDirectory() + "settee-kvchannel-\(UUID().uuidString)"
        let registry: NodeRegistry
        let node: KVNode
        let channel: NIOAsyncTestingChannel
        private var opaque: UInt32 = 1

        init(open: Bool, handshakeDeadline: TimeAmount = .seconds(10), ramQuotaMB: Int = 64) async throws {
            let info = NodeInfo(
                otpNode: NodeID("n0@127.0.0.1"), host: "127.0.0.1", adminPort: 0, kvPort: 0, viewsPort: 0,
                nodeUUID: "")
            registry = try NodeRegistry(dataDirectory: dir, node: info, logger: quietLogger)
            try registry.initialize(username: adminUser, password: adminPassword)
            try registry.createBucket(
                BucketSettings(
                    name: bucketName, uuid: String(repeating: "ab", count: 16), ramQuotaMB: ramQuotaMB,
                    replicaNumber: 0,
                    flushEnabled: false, authType: open ? .none : .sasl, numVBuckets: 4))
            node = KVNode(registry: registry, logger: quietLogger, handshakeDeadline: handshakeDeadline)
            let node = self.node
            channel = try await NIOAsyncTestingChannel { channel in
                try channel.pipeline.syncOperations.addHandler(KVConnectionHandler(node: node))
            }
            try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 40000))
        }

        func request(_ opcode: Opcode, key: String = "", value: [UInt8] = [], extras: [UInt8] = []) -> ByteBuffer {
            var b = ByteBuffer()
            let keyBytes = Array(key.utf8)
            b.writeRequest(
                opcode: opcode, vbucket: VBucketHash.vbucket(forKey: keyBytes, count: 4).rawValue, opaque: opaque,
                extras: extras, key: keyBytes, value: value)
            opaque &+= 1
            return b
        }

        /// Every whole response the handler has written so far.
        func responses() async throws -> [Frame] {
            var all = ByteBuffer()
            while var b = try await channel.readOutbound(as: ByteBuffer.self) { all.writeBuffer(&b) }
            var frames: [Frame] = []
            while let f = try FrameDecoder.decode(&all, maxBodyLength: Limits.maxFrameBodySize) { frames.append(f) }
            #expect(all.readableBytes == 0, "a partial response was written")
            return frames
        }

        /// The autoRead value the handler last set (the testing channel records options but always reports
        /// autoRead as on through `getOption`).
        var autoRead: Bool? {
            channel.options.first { $0.option is ChannelOptions.Types.AutoReadOption }?.value as? Bool
        }

        func finish() async {
            _ = try? await channel.finish()
            node.shutdownPool()
            registry.shutdown()
            try? FileManager.default.removeItem(atPath: dir)
        }
    }

    static let setExtras: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0]

    /// Proves pipelined requests that arrive in one read are answered in arrival order (opaques ascend) with
    /// the values the earlier writes in the same read stored.
    @Test func pipelinedRequestsAreAnsweredInOrder() async throws {
        let f = try await Fixture(open: true)
        var batch = ByteBuffer()
        for i in 0..<64 {
            var r = f.request(.set, key: "k\(i)", value: Array("v\(i)".utf8), extras: Self.setExtras)
            batch.writeBuffer(&r)
        }
        for i in 0..<64 {
            var r = f.request(.get, key: "k\(i)")
            batch.writeBuffer(&r)
        }
        try await f.channel.writeInbound(batch)
        let frames = try await f.responses()
        #expect(frames.count == 128)
        #expect(frames.map(\.opaque) == (1...128).map { UInt32($0) })
        #expect(frames.allSatisfy { $0.status == .success })
        for i in 0..<64 {
            #expect(Array(frames[64 + i].value.readableBytesView) == Array("v\(i)".utf8))
        }
        #expect(f.node.counters.sets == 64 && f.node.counters.gets == 64 && f.node.counters.getHits == 64)
        await f.finish()
    }

    /// Proves a read of pipelined requests whose look-ups are warmed together first (ADR 0114) is answered as it would
    /// be without: once the connection has its bucket, one read carries hits, misses, a vBucket the bucket does not
    /// have, an empty key, a key longer than the warmed ones, more requests than one `warm` call takes, and a last
    /// frame cut short, which is answered once the next read completes it. Then the same with collections
    /// negotiated, where the warmed keys lose their collection prefix and a key of another collection is refused.
    @Test func warmedLookupsAnswerAsBefore() async throws {
        let f = try await Fixture(open: true)
        let long = String(repeating: "l", count: 40)
        var setup = ByteBuffer()
        for key in ["w0", "w1", long] {
            var r = f.request(.set, key: key, value: Array("v-\(key)".utf8), extras: Self.setExtras)
            setup.writeBuffer(&r)
        }
        try await f.channel.writeInbound(setup)
        #expect(try await f.responses().map(\.status) == [.success, .success, .success])

        var batch = ByteBuffer()
        var expected: [(Status, String?)] = []
        func add(_ r: ByteBuffer, _ status: Status, _ value: String?) {
            var r = r
            batch.writeBuffer(&r)
            expected.append((status, value))
        }
        add(f.request(.get, key: "w0"), .success, "v-w0")
        add(f.request(.get, key: "absent"), .keyNotFound, nil)
        var elsewhere = ByteBuffer()
        elsewhere.writeRequest(opcode: .get, vbucket: 9_999, opaque: 900, key: Array("w0".utf8))
        add(elsewhere, .notMyVBucket, nil)
        add(f.request(.get, key: ""), .invalidArguments, nil)
        add(f.request(.get, key: long), .success, "v-\(long)")
        for i in 0..<(BucketEngine.warmCapacity + 8) {
            add(f.request(.get, key: "w\(i % 2)"), .success, "v-w\(i % 2)")
        }
        var cut = f.request(.get, key: "w1")
        let sliced = cut.readSlice(length: 25)
        let head = try #require(sliced)
        add(head, .success, "v-w1")
        try await f.channel.writeInbound(batch)
        var answers = try await f.responses()
        #expect(answers.count == expected.count - 1)
        try await f.channel.writeInbound(cut)
        answers += try await f.responses()
        #expect(answers.count == expected.count)
        for (answer, (status, value)) in zip(answers, expected) {
            #expect(answer.status == status)
            if let value { #expect(String(buffer: answer.value) == value) }
        }

        var hello = ByteBuffer()
        hello.writeRequest(opcode: .hello, opaque: 1_000, value: [0x00, 0x12])
        try await f.channel.writeInbound(hello)
        #expect(try await f.responses().map(\.status) == [.success])
        var scoped = ByteBuffer()
        for (prefix, key) in [(UInt8(0), "w0"), (0x08, "w1"), (0, "w1"), (0, "absent")] {
            let bytes = [prefix] + Array(key.utf8)
            scoped.writeRequest(
                opcode: .get, vbucket: VBucketHash.vbucket(forKey: Array(key.utf8), count: 4).rawValue, opaque: 2_000,
                key: bytes)
        }
        try await f.channel.writeInbound(scoped)
        let inCollections = try await f.responses()
        #expect(inCollections.map(\.status) == [.success, .unknownCollection, .success, .keyNotFound])
        #expect(inCollections.first.map { String(buffer: $0.value) } == "v-w0")
        #expect(inCollections.dropFirst(2).first.map { String(buffer: $0.value) } == "v-w1")
        await f.finish()
    }

    /// Proves the connection's cached bucket lookup (one `ResolvedBucket` reused per request, ADR 0071) follows the
    /// registry: requests after the first are answered from the cached bucket, and once the bucket is deleted (the
    /// registry's generation moves) the same connection's next request answers NO_BUCKET instead of using the
    /// cached engine.
    @Test func theCachedBucketFollowsTheRegistry() async throws {
        let f = try await Fixture(open: true)
        var batch = f.request(.set, key: "cached", value: Array("v".utf8), extras: Self.setExtras)
        var get = f.request(.get, key: "cached")
        batch.writeBuffer(&get)
        try await f.channel.writeInbound(batch)
        let first = try await f.responses()
        #expect(first.map(\.status) == [.success, .success])
        #expect(first.last.map { Array($0.value.readableBytesView) } == Array("v".utf8))
        let before = f.registry.generation
        try f.registry.deleteBucket(named: bucketName)
        #expect(f.registry.generation != before)
        try await f.channel.writeInbound(f.request(.get, key: "cached"))
        #expect(try await f.responses().map(\.status) == [.noBucket])
        // Two requests in one read go through the look-ahead (ADR 0114) first: it must not warm the deleted
        // bucket's engine into an answer, nor stop the second request's.
        var two = f.request(.get, key: "cached")
        var again = f.request(.get, key: "other")
        two.writeBuffer(&again)
        try await f.channel.writeInbound(two)
        #expect(try await f.responses().map(\.status) == [.noBucket, .noBucket])
        await f.finish()
    }

    /// Proves a SET stores the frame's value byte for byte at the item's size edges (the value is read in place
    /// from the frame, ADR 0048): none, one byte, 24, the benchmark's ~983, 1 KiB and the largest value, each
    /// read back by a GET after all of them were written (the handler's read buffer reused meanwhile). That the
    /// engine keeps no reference to borrowed bytes is `BorrowedValueStoreTests` (the buffer rewritten and freed).
    @Test func aSetStoresTheFramesValueAtSizeEdges() async throws {
        let f = try await Fixture(open: true)
        let sizes = [0, 1, 24, 983, 1024, Limits.maxValueSize]
        var sent: [[UInt8]] = []
        for (n, size) in sizes.enumerated() {
            let value = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ n &+ 1) }
            sent.append(value)
            try await f.channel.writeInbound(f.request(.set, key: "edge-\(n)", value: value, extras: Self.setExtras))
            #expect(try await f.responses().map(\.status) == [.success])
        }
        for (n, value) in sent.enumerated() {
            var get = f.request(.get, key: "edge-\(n)")
            try await f.channel.writeInbound(get.readSlice(length: get.readableBytes)!)
            let answer = try await f.responses()
            #expect(answer.count == 1 && answer.first?.status == .success)
            #expect(answer.first.map { Array($0.value.readableBytesView) } == value, "size \(sizes[n])")
        }
        await f.finish()
    }

    /// Proves a frame delivered one byte per read is answered once, after its last byte, and nothing earlier.
    @Test func aFrameSplitIntoSingleBytesIsAnsweredOnce() async throws {
        let f = try await Fixture(open: true)
        let frame = f.request(.set, key: "split", value: Array(repeating: 0x61, count: 300), extras: Self.setExtras)
        let bytes = Array(frame.readableBytesView)
        for (i, byte) in bytes.enumerated() {
            try await f.channel.writeInbound(ByteBuffer(bytes: [byte]))
            if i < bytes.count - 1 { #expect(try await f.channel.readOutbound(as: ByteBuffer.self) == nil) }
        }
        let frames = try await f.responses()
        #expect(frames.count == 1)
        #expect(frames.first?.status == .success)
        var get = f.request(.get, key: "split")
        try await f.channel.writeInbound(get.readSlice(length: get.readableBytes)!)
        #expect(try await f.responses().first?.value.readableBytes == 300)
        await f.finish()
    }

    /// Proves the backpressure rule for every operation: while the channel is not writable (a client that
    /// never reads), requests stay unprocessed and reading stops; once it turns writable, each is answered.
    @Test func anUnwritableChannelStopsProcessingUntilItDrains() async throws {
        let f = try await Fixture(open: true)
        f.channel.isWritable = false
        var batch = ByteBuffer()
        for i in 0..<10 {
            var r = f.request(.get, key: "missing\(i)")
            batch.writeBuffer(&r)
        }
        try await f.channel.writeInbound(batch)
        #expect(try await f.responses().isEmpty)
        #expect(f.autoRead == false)
        f.channel.isWritable = true
        f.channel.pipeline.fireChannelWritabilityChanged()
        let frames = try await f.responses()
        #expect(frames.count == 10)
        #expect(frames.allSatisfy { $0.status == .keyNotFound })
        #expect(f.autoRead == true)
        await f.finish()
    }

    /// Proves a frame over the node's size limit from an established connection is answered E2BIG and its
    /// body skipped, however it is split, and the next request on the connection is answered normally.
    @Test func anOversizedFrameIsAnsweredTooBigAndSkipped() async throws {
        let f = try await Fixture(open: true)
        let bodyLength = Limits.maxFrameBodySize + 1
        var header = ByteBuffer()
        header.writeInteger(Magic.clientRequest.rawValue)
        header.writeInteger(Opcode.set.rawValue)
        header.writeInteger(UInt16(3))  // key length
        header.writeInteger(UInt8(8))  // extras length
        header.writeInteger(UInt8(0))
        header.writeInteger(UInt16(0))
        header.writeInteger(UInt32(bodyLength))
        header.writeInteger(UInt32(77))
        header.writeInteger(UInt64(0))
        // Establish the connection on the open bucket first, so the size rule (not the stranger's) applies.
        var first = f.request(.set, key: "a", value: [1], extras: Self.setExtras)
        try await f.channel.writeInbound(first.readSlice(length: first.readableBytes)!)
        #expect(try await f.responses().first?.status == .success)
        try await f.channel.writeInbound(header)
        let chunk = ByteBuffer(repeating: 0, count: 1 << 20)
        var left = bodyLength
        while left > 0 {
            let n = min(left, chunk.readableBytes)
            try await f.channel.writeInbound(chunk.getSlice(at: 0, length: n)!)
            left -= n
        }
        var after = f.request(.get, key: "a")
        try await f.channel.writeInbound(after.readSlice(length: after.readableBytes)!)
        let frames = try await f.responses()
        #expect(frames.map(\.opaque) == [77, 2])
        #expect(frames.first?.status == .valueTooLarge)
        #expect(frames.last?.status == .success)
        #expect(f.channel.isActive)
        await f.finish()
    }

    /// Proves a stranger (no authentication, no open bucket) is held to the small frame limit: a frame body
    /// over `Limits.kvUnauthenticatedMaxFrameBody` closes the connection without answering it.
    @Test func aStrangersLargeFrameClosesTheConnection() async throws {
        let f = try await Fixture(open: false)
        let value = [UInt8](repeating: 0x62, count: Limits.kvUnauthenticatedMaxFrameBody + 1)
        let frame = f.request(.set, key: "big", value: value, extras: Self.setExtras)
        try await f.channel.writeInbound(frame)
        #expect(try await f.responses().isEmpty)
        try await f.channel.closeFuture.get()
        #expect(!f.channel.isActive)
        await f.finish()
    }

    /// Proves the handshake deadline: a stranger that sends nothing is closed once the deadline and its random
    /// spread (at most `kvHandshakeDeadlineSpreadPercent` more, ADR 0042) pass, and not a moment before the
    /// deadline (time moves only when the test advances it).
    @Test func anIdleStrangerIsClosedAtTheHandshakeDeadline() async throws {
        let f = try await Fixture(open: false, handshakeDeadline: .seconds(5))
        await f.channel.testingEventLoop.advanceTime(by: .milliseconds(4_900))
        #expect(f.channel.isActive)
        let spreadMs = Int64(5_000 * Limits.kvHandshakeDeadlineSpreadPercent / 100)
        await f.channel.testingEventLoop.advanceTime(by: .milliseconds(100 + spreadMs + 100))
        try await f.channel.closeFuture.get()
        #expect(!f.channel.isActive)
        #expect(f.node.counters.handshakeTimeouts.load(ordering: .relaxed) == 1)
        await f.finish()
    }

    /// Proves a frame with an unknown magic byte closes the connection and is counted as a protocol error.
    @Test func anUnknownMagicClosesTheConnection() async throws {
        let f = try await Fixture(open: true)
        var bad = f.request(.get, key: "x")
        bad.setInteger(UInt8(0x42), at: bad.readerIndex)
        try await f.channel.writeInbound(bad)
        try await f.channel.closeFuture.get()
        #expect(try await f.responses().isEmpty)
        #expect(f.node.counters.protocolErrors.load(ordering: .relaxed) == 1)
        await f.finish()
    }

    /// Proves GET_AND_LOCK and UNLOCK_KEY, now ordinary data requests, keep Couchbase's rules when pipelined
    /// with other requests: a locked document refuses a plain SET and a second lock, a GET reports CAS -1, a
    /// wrong CAS does not unlock, the lock CAS does, and unlocking again is NOT_LOCKED (0x0e).
    @Test func locksArePipelinedDataRequests() async throws {
        let f = try await Fixture(open: true)
        var first = f.request(.set, key: "doc", value: Array("v".utf8), extras: Self.setExtras)
        try await f.channel.writeInbound(first.readSlice(length: first.readableBytes)!)
        let stored = try await f.responses()
        #expect(stored.first?.status == .success)
        var lock = f.request(.getLocked, key: "doc", extras: [0, 0, 0, 15])
        try await f.channel.writeInbound(lock.readSlice(length: lock.readableBytes)!)
        let locked = try #require(try await f.responses().first)
        #expect(locked.status == .success && locked.cas != stored.first?.cas)
        var batch = ByteBuffer()
        for r in [
            f.request(.set, key: "doc", value: Array("w".utf8), extras: Self.setExtras),
            f.request(.getLocked, key: "doc", extras: [0, 0, 0, 15]), f.request(.get, key: "doc"),
        ] {
            var r = r
            batch.writeBuffer(&r)
        }
        var wrong = f.request(.unlockKey, key: "doc")
        wrong.setInteger(locked.cas &+ 1, at: wrong.readerIndex + 16)
        batch.writeBuffer(&wrong)
        for _ in 0..<2 {
            var unlock = f.request(.unlockKey, key: "doc")
            unlock.setInteger(locked.cas, at: unlock.readerIndex + 16)
            batch.writeBuffer(&unlock)
        }
        try await f.channel.writeInbound(batch)
        let answers = try await f.responses()
        #expect(answers.map(\.status) == [.locked, .locked, .success, .locked, .success, Status(0x0e)])
        #expect(answers[2].cas == UInt64.max)
        await f.finish()
    }
}

/// The per-event-loop operation counters: each loop writes its own block, and the node's totals add them up.
@Suite struct LoopCountersTests {
    /// Proves two event loops get distinct blocks (the same one on every lookup from a loop) and that STAT's
    /// totals are the sum of every loop's counts.
    @Test func eachLoopCountsInItsOwnBlockAndTotalsAddUp() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let loops = Array(group.makeIterator())
        let counters = NodeCounters(startedAt: 0)
        let a = counters.forLoop(loops[0])
        let b = counters.forLoop(loops[1])
        #expect(a !== b)
        #expect(counters.forLoop(loops[0]) === a)
        a.cmdGet.wrappingAdd(3, ordering: .relaxed)
        b.cmdGet.wrappingAdd(4, ordering: .relaxed)
        b.cmdSet.wrappingAdd(2, ordering: .relaxed)
        a.getMisses.wrappingAdd(1, ordering: .relaxed)
        #expect(counters.gets == 7 && counters.sets == 2 && counters.getMisses == 1 && counters.getHits == 0)
        try await group.shutdownGracefully()
    }
}
