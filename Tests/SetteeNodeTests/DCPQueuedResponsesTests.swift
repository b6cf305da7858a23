import Foundation
import NIOCore
import NIOEmbedded
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import SetteeStorage
import Testing

@testable import SetteeNode

/// A DCP producer connection with a request waiting for its answer (DCPProducerState invariant 5): what the streams
/// emit meanwhile is queued behind that answer, not written, so the socket's water marks never stop them.
@Suite(.serialized) struct DCPQueuedResponsesTests {
    /// What the test reads of the handler on its event loop.
    struct Snapshot: Sendable, Equatable {
        var queuedBytes: Int
        var slots: Int
        var scansInFlight: Int
        var queuePaused: Bool
    }

    static let vbuckets: [UInt16] = [0, 1, 2, 3]
    static let itemsPerVBucket = 6_000
    static let valueSize = 1_024

    /// One request frame for `vbucket`.
    static func frame(
        _ opcode: Opcode, vbucket: UInt16 = 0, opaque: UInt32, extras: [UInt8] = [], key: [UInt8] = [],
        value: [UInt8] = []
    ) -> ByteBuffer {
        var b = ByteBuffer()
        b.writeRequest(opcode: opcode, vbucket: vbucket, opaque: opaque, extras: extras, key: key, value: value)
        return b
    }

    static func snapshot(_ f: KVHandlerChannelTests.Fixture) async throws -> Snapshot {
        try await f.channel.testingEventLoop.executeInContext {
            let h = try f.channel.pipeline.syncOperations.handler(type: KVConnectionHandler.self)
            return Snapshot(
                queuedBytes: h.queuedBytes, slots: h.slots.count, scansInFlight: h.dcp?.scansInFlight ?? -1,
                queuePaused: h.dcp?.queuePaused ?? false)
        }
    }

    /// Proves a stream without flow control stops scanning while a failed SASL PLAIN (answered after
    /// `Limits.loginFailureDelayMs`) holds the connection's ordered queue: four streams from 0 over 24,000 items of
    /// 1 KiB (~26 MiB) queue at most `Limits.kvMaxQueuedResponseBytes` plus the batches of the scans already running,
    /// and once the login is answered the streams resume and deliver every item, in seqno order with contiguous
    /// snapshots, after the login's answer and the stream requests' (before, the scans went on and the connection held
    /// everything they read).
    @Test func streamsStopWhileAnAnswerWaitsAndResumeAfterIt() async throws {
        let f = try await KVHandlerChannelTests.Fixture(open: true, ramQuotaMB: 256)
        let engine = try #require(f.registry.bucket(named: bucketName))
        let value = [UInt8](repeating: 0x61, count: Self.valueSize)
        for vb in Self.vbuckets {
            for i in 0..<Self.itemsPerVBucket {
                _ = try engine.store(
                    .set, VBucketID(vb), key("k\(vb)-\(i)"), value: value, flags: 0, expiry: 0, datatype: .raw,
                    cas: .zero)
            }
        }

        var open = Self.frame(.selectBucket, opaque: 1, key: Array(bucketName.utf8))
        var openExtras = ByteBuffer()
        openExtras.writeInteger(UInt32(0))
        openExtras.writeInteger(DCPOpenFlags.producer)
        var dcpOpen = Self.frame(
            .dcpOpen, opaque: 2, extras: Array(openExtras.readableBytesView), key: Array("queued-responses".utf8))
        open.writeBuffer(&dcpOpen)
        try await f.channel.writeInbound(open)
        #expect(try await f.responses().map(\.status) == [.success, .success])

        // The login first (nothing queued, so it is taken), then the stream requests, whose answers and batches queue
        // behind it. No CONTROL connection_buffer_size: no flow-control window.
        var burst = Self.frame(.saslAuth, opaque: 3, key: Array("PLAIN".utf8), value: Array("\0nobody\0wrong".utf8))
        var x = ByteBuffer()
        DCPExtras.StreamRequest(start: 0, end: UInt64.max, uuid: 0, snapStart: 0, snapEnd: 0).write(to: &x)
        for vb in Self.vbuckets {
            var r = Self.frame(
                .dcpStreamRequest, vbucket: vb, opaque: 10 + UInt32(vb), extras: Array(x.readableBytesView))
            burst.writeBuffer(&r)
        }
        try await f.channel.writeInbound(burst)

        // Wait (real time: the scans run on the node's stream pool) until no scan runs and none would start.
        var held = try await Self.snapshot(f)
        let quietBy = Date().addingTimeInterval(60)
        while held.scansInFlight != 0, Date() < quietBy {
            try await Task.sleep(for: .milliseconds(20))
            held = try await Self.snapshot(f)
        }
        #expect(held.scansInFlight == 0)
        #expect(try await f.responses().isEmpty, "something was answered ahead of the waiting login")
        // Per batch: at most `dcpBatchItems` mutations (header, extras, key, value) and its marker.
        let perItem = Frame.headerLength + DCPExtras.mutationLength + "k0-0000".utf8.count + Self.valueSize
        let batch = Limits.dcpBatchItems * perItem + 128
        let bound = Limits.kvMaxQueuedResponseBytes + Limits.dcpScansPerConnection * batch + 4_096
        let total = Self.vbuckets.count * Self.itemsPerVBucket * perItem
        #expect(total > 2 * bound, "the items would fit under the bound anyway")
        #expect(held.queuedBytes <= bound, "queued behind the login: \(held.queuedBytes) bytes, bound \(bound)")
        #expect(held.queuedBytes > Limits.kvMaxQueuedResponseBytes, "the streams stopped before the bound")
        #expect(held.queuePaused)

        // The login's answer (virtual time: the delay is a task on the testing loop) drains the queue and restarts
        // the streams; read until every item arrived.
        var frames: [Frame] = []
        var mutations = 0
        let deliveredBy = Date().addingTimeInterval(60)
        while mutations < Self.vbuckets.count * Self.itemsPerVBucket, Date() < deliveredBy {
            await f.channel.testingEventLoop.advanceTime(by: .milliseconds(Int64(Limits.loginFailureDelayMs)))
            let more = try await f.responses()
            mutations += more.filter { $0.opcode == .dcpMutation }.count
            frames += more
            if more.isEmpty { try await Task.sleep(for: .milliseconds(20)) }
        }
        #expect(mutations == Self.vbuckets.count * Self.itemsPerVBucket)
        let after = try await Self.snapshot(f)
        #expect(after.queuedBytes == 0 && after.slots == 0 && !after.queuePaused)

        // In order: the login's answer, the stream requests' answers, then each stream's snapshots.
        #expect(frames.first?.opcode == .saslAuth && frames.first?.status == .authError)
        #expect(frames.dropFirst().prefix(Self.vbuckets.count).map(\.opaque) == Self.vbuckets.map { 10 + UInt32($0) })
        #expect(frames.dropFirst().prefix(Self.vbuckets.count).allSatisfy { $0.status == .success })
        var last: [UInt16: UInt64] = [:]
        var snapshotEnd: [UInt16: UInt64] = [:]
        for m in frames.dropFirst(1 + Self.vbuckets.count) {
            let start = m.extras.getInteger(at: m.extras.readerIndex, as: UInt64.self) ?? 0
            switch m.opcode {
            case .dcpSnapshotMarker:
                #expect(start == (last[m.vbucket] ?? 0) + 1, "vb \(m.vbucket): a gap before a snapshot")
                snapshotEnd[m.vbucket] = m.extras.getInteger(at: m.extras.readerIndex + 8, as: UInt64.self)
            case .dcpMutation:
                #expect(start == (last[m.vbucket] ?? 0) + 1, "vb \(m.vbucket): seqno \(start) out of order")
                #expect(start <= snapshotEnd[m.vbucket] ?? 0)
                last[m.vbucket] = start
            default:
                Issue.record("unexpected \(m.opcode) on vb \(m.vbucket)")
            }
        }
        #expect(Self.vbuckets.allSatisfy { last[$0] == UInt64(Self.itemsPerVBucket) })
        await f.finish()
    }
}
