import Foundation
import NIOCore
import NIOEmbedded
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import Testing

@testable import SetteeNode

/// Collections on the KV port, driven in-process through NIO's testing channel (ADR 0129): the manifest the registry
/// holds answers GET_COLLECTIONS_MANIFEST / GET_COLLECTION_ID / GET_SCOPE_ID, and each collection is its own key space.
@Suite(.serialized) struct KVCollectionsChannelTests {
    typealias Fixture = KVHandlerChannelTests.Fixture

    static func request(
        _ opcode: Opcode, collection: UInt32, key: String, value: [UInt8] = [], extras: [UInt8] = [], opaque: UInt32
    ) -> ByteBuffer {
        var b = ByteBuffer()
        let logical = Array(key.utf8)
        b.writeRequest(
            opcode: opcode, vbucket: VBucketHash.vbucket(forKey: logical, count: 4).rawValue, opaque: opaque,
            extras: extras, key: CollectionKey.encodePrefix(collection) + logical, value: value)
        return b
    }

    static func hello(_ f: Fixture) async throws {
        var hello = ByteBuffer()
        hello.writeRequest(opcode: .hello, opaque: 1_000, value: [0x00, 0x12])
        try await f.channel.writeInbound(hello)
        #expect(try await f.responses().map(\.status) == [.success])
    }

    /// Proves a collection created in the registry is resolved by name (extras: manifest uid, id), the manifest is
    /// served as JSON with its uid, unknown names answer 0x8c / 0x88 with the manifest uid in the body, and a
    /// collection dropped later is refused on the same connection (the cached bucket follows the generation).
    @Test func namesResolveFromTheRegistrysManifest() async throws {
        let f = try await Fixture(open: true)
        try f.registry.editCollections(bucket: bucketName) { m throws(CollectionsManifest.EditError) in
            try m.createScope("s")
            try m.createCollection("c", inScope: "s")
        }
        try await Self.hello(f)
        var batch = ByteBuffer()
        batch.writeRequest(opcode: .getCollectionID, opaque: 1, value: Array("s.c".utf8))
        batch.writeRequest(opcode: .getScopeID, opaque: 2, value: Array("s".utf8))
        batch.writeRequest(opcode: .getCollectionID, opaque: 3, value: Array("s.nope".utf8))
        batch.writeRequest(opcode: .getCollectionID, opaque: 4, value: Array("nope.c".utf8))
        batch.writeRequest(opcode: .getCollectionsManifest, opaque: 5)
        try await f.channel.writeInbound(batch)
        let answers = try await f.responses()
        #expect(answers.map(\.status) == [.success, .success, .unknownCollection, .unknownScope, .success])
        #expect(Array(answers[0].extras.readableBytesView) == [0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 8])
        #expect(Array(answers[1].extras.readableBytesView) == [0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 8])
        #expect(String(buffer: answers[2].value) == #"{"manifest_uid":"2"}"#)
        #expect(String(buffer: answers[4].value).contains(#"{"name":"c","uid":"8","maxTTL":0"#))

        try f.registry.editCollections(bucket: bucketName) { m throws(CollectionsManifest.EditError) in
            try m.dropCollection("c", inScope: "s")
        }
        try await f.channel.writeInbound(Self.request(.get, collection: 8, key: "k", opaque: 6))
        let dropped = try await f.responses()
        #expect(dropped.map(\.status) == [.unknownCollection])
        #expect(dropped.first.map { String(buffer: $0.value) } == #"{"manifest_uid":"3"}"#)
        await f.finish()
    }

    /// Proves the same key in the default collection and in a named one are two documents: each GET sees its own
    /// value, a DELETE in one leaves the other, a client without Collections reaches the default's only, and a key
    /// whose first byte is the engine's marker, or a named collection's key past 246 bytes, is refused (EINVAL).
    @Test func eachCollectionIsItsOwnKeySpace() async throws {
        let f = try await Fixture(open: true)
        try f.registry.editCollections(bucket: bucketName) { m throws(CollectionsManifest.EditError) in
            try m.createScope("s")
            try m.createCollection("c", inScope: "s")
        }
        // A connection without Collections: its keys are the default collection's, and none may start with the
        // marker byte of named collections' engine keys.
        try await f.channel.writeInbound(
            f.request(.set, key: "k", value: Array("plain".utf8), extras: [0, 0, 0, 0, 0, 0, 0, 0]))
        #expect(try await f.responses().map(\.status) == [.success])
        var marked = ByteBuffer()
        marked.writeRequest(opcode: .get, vbucket: 0, opaque: 50, key: [CollectionKey.engineMarker, 0x08, 0x6b])
        try await f.channel.writeInbound(marked)
        #expect(try await f.responses().map(\.status) == [.invalidArguments])

        try await Self.hello(f)
        let extras: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0]
        var batch = ByteBuffer()
        var r = Self.request(.set, collection: 8, key: "k", value: Array("named".utf8), extras: extras, opaque: 1)
        batch.writeBuffer(&r)
        for (i, collection) in [UInt32(0), 8].enumerated() {
            var g = Self.request(.get, collection: collection, key: "k", opaque: UInt32(2 + i))
            batch.writeBuffer(&g)
        }
        var d = Self.request(.delete, collection: 8, key: "k", opaque: 4)
        batch.writeBuffer(&d)
        for (i, collection) in [UInt32(0), 8].enumerated() {
            var g = Self.request(.get, collection: collection, key: "k", opaque: UInt32(5 + i))
            batch.writeBuffer(&g)
        }
        var long = Self.request(.get, collection: 8, key: String(repeating: "a", count: 247), opaque: 7)
        batch.writeBuffer(&long)
        var markedDefault = ByteBuffer()
        markedDefault.writeRequest(opcode: .get, vbucket: 0, opaque: 8, key: [0x00, CollectionKey.engineMarker, 0x6b])
        batch.writeBuffer(&markedDefault)
        try await f.channel.writeInbound(batch)
        let answers = try await f.responses()
        #expect(
            answers.map(\.status) == [
                .success, .success, .success, .success, .success, .keyNotFound, .invalidArguments, .invalidArguments,
            ])
        #expect(String(buffer: answers[1].value) == "plain")
        #expect(String(buffer: answers[2].value) == "named")
        #expect(String(buffer: answers[4].value) == "plain")
        await f.finish()
    }

    /// Proves a collection's maxTTL as kv_engine applies it: no expiry becomes now + maxTTL, a later one (relative or
    /// absolute) is brought forward to it, an earlier one is kept, and nothing overflows at the top of the range.
    @Test func maxTTLCapsExpiries() {
        let now: UInt32 = 1_700_000_000
        #expect(CollectionTTL.capped(0, maxTTL: 60, nowSeconds: now) == now + 60)
        #expect(CollectionTTL.capped(30, maxTTL: 60, nowSeconds: now) == now + 30)
        #expect(CollectionTTL.capped(3_600, maxTTL: 60, nowSeconds: now) == now + 60)
        #expect(CollectionTTL.capped(now + 10, maxTTL: 60, nowSeconds: now) == now + 10)
        #expect(CollectionTTL.capped(now + 600, maxTTL: 60, nowSeconds: now) == now + 60)
        #expect(CollectionTTL.capped(0, maxTTL: UInt32.max, nowSeconds: UInt32.max) == UInt32.max)
    }
}
