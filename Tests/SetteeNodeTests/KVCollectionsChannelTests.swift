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

    /// Proves the connection's last-collection shortcut (a request to the collection it used last skips the manifest
    /// lookup while the registry is unchanged) never outlives what it stood for: after the collection is dropped, after
    /// it is created again under a new id, and after SELECT_BUCKET to a bucket without it, a request with the old id
    /// is refused with UNKNOWN_COLLECTION, on the same connection that had just used it.
    @Test func aConnectionsLastCollectionIsCheckedAgainWhenTheManifestOrBucketChanges() async throws {
        let f = try await Fixture(open: true)
        try f.registry.editCollections(bucket: bucketName) { m throws(CollectionsManifest.EditError) in
            try m.createScope("s")
            try m.createCollection("c", inScope: "s")
        }
        try f.registry.createBucket(
            BucketSettings(
                name: "other", uuid: String(repeating: "cd", count: 16), ramQuotaMB: 64, replicaNumber: 0,
                flushEnabled: false, authType: .none, numVBuckets: 4))
        try await Self.hello(f)
        // Two open buckets: the connection names its own (neither is the implicit one any more).
        try await f.channel.writeInbound(f.request(.selectBucket, key: bucketName))
        #expect(try await f.responses().map(\.status) == [.success])
        let extras: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0]
        var batch = ByteBuffer()
        var set = Self.request(.set, collection: 8, key: "k", value: Array("v".utf8), extras: extras, opaque: 1)
        batch.writeBuffer(&set)
        var get = Self.request(.get, collection: 8, key: "k", opaque: 2)
        batch.writeBuffer(&get)
        try await f.channel.writeInbound(batch)
        let used = try await f.responses()
        #expect(used.map(\.status) == [.success, .success])
        #expect(used.last.map { String(buffer: $0.value) } == "v")

        try f.registry.editCollections(bucket: bucketName) { m throws(CollectionsManifest.EditError) in
            try m.dropCollection("c", inScope: "s")
        }
        try await f.channel.writeInbound(Self.request(.get, collection: 8, key: "k", opaque: 3))
        #expect(try await f.responses().map(\.status) == [.unknownCollection])

        try f.registry.editCollections(bucket: bucketName) { m throws(CollectionsManifest.EditError) in
            try m.createCollection("c", inScope: "s")
        }
        var again = ByteBuffer()
        again.writeRequest(opcode: .getCollectionID, opaque: 4, value: Array("s.c".utf8))
        var old = Self.request(.get, collection: 8, key: "k", opaque: 5)
        again.writeBuffer(&old)
        var fresh = Self.request(.get, collection: 9, key: "k", opaque: 6)
        again.writeBuffer(&fresh)
        try await f.channel.writeInbound(again)
        let recreated = try await f.responses()
        #expect(recreated.map(\.status) == [.success, .unknownCollection, .keyNotFound])
        #expect(recreated.first.map { Array($0.extras.readableBytesView.suffix(4)) } == [0, 0, 0, 9])

        try await f.channel.writeInbound(f.request(.selectBucket, key: "other"))
        #expect(try await f.responses().map(\.status) == [.success])
        try await f.channel.writeInbound(Self.request(.get, collection: 9, key: "k", opaque: 7))
        #expect(try await f.responses().map(\.status) == [.unknownCollection])
        await f.finish()
    }

    /// Proves the same key in the default collection and in a named one are two documents: each GET sees its own
    /// value, a DELETE in one leaves the other, a client without Collections reaches the default's only, and a named
    /// collection's key past 246 bytes is refused (EINVAL).
    @Test func eachCollectionIsItsOwnKeySpace() async throws {
        let f = try await Fixture(open: true)
        try f.registry.editCollections(bucket: bucketName) { m throws(CollectionsManifest.EditError) in
            try m.createScope("s")
            try m.createCollection("c", inScope: "s")
        }
        // A connection without Collections: its keys are the default collection's.
        try await f.channel.writeInbound(
            f.request(.set, key: "k", value: Array("plain".utf8), extras: [0, 0, 0, 0, 0, 0, 0, 0]))
        #expect(try await f.responses().map(\.status) == [.success])

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
        try await f.channel.writeInbound(batch)
        let answers = try await f.responses()
        #expect(
            answers.map(\.status) == [
                .success, .success, .success, .success, .success, .keyNotFound, .invalidArguments,
            ])
        #expect(String(buffer: answers[1].value) == "plain")
        #expect(String(buffer: answers[2].value) == "named")
        #expect(String(buffer: answers[4].value) == "plain")
        await f.finish()
    }

    /// Proves memcached binary keys starting with byte 0xff (the marker of named collections' engine keys; memcaslap
    /// sends them) are the default collection's, from a client with or without Collections: stored (escaped), read
    /// back, GETK answering the client's own key, and never aliasing the named collection whose engine key has the
    /// same bytes. Such a key is refused (EINVAL, with a context) only past 248 bytes, where its escaped form would
    /// pass the engine's 250.
    @Test func keysStartingWithTheMarkerAreTheDefaultCollections() async throws {
        let f = try await Fixture(open: true)
        try f.registry.editCollections(bucket: bucketName) { m throws(CollectionsManifest.EditError) in
            try m.createScope("s")
            try m.createCollection("c", inScope: "s")
        }
        let extras: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0]
        // The bytes of collection 8's engine key for "k".
        let binary: [UInt8] = [CollectionKey.engineMarker, 0x08, 0x6b]
        var plain = ByteBuffer()
        plain.writeRequest(opcode: .set, vbucket: 0, opaque: 1, extras: extras, key: binary, value: Array("bin".utf8))
        plain.writeRequest(opcode: .getk, vbucket: 0, opaque: 2, key: binary)
        let longest = [CollectionKey.engineMarker] + [UInt8](repeating: 0x61, count: 247)
        plain.writeRequest(opcode: .set, vbucket: 0, opaque: 3, extras: extras, key: longest, value: [0x31])
        plain.writeRequest(opcode: .get, vbucket: 0, opaque: 4, key: longest + [0x61])
        try await f.channel.writeInbound(plain)
        let first = try await f.responses()
        #expect(first.map(\.status) == [.success, .success, .success, .invalidArguments])
        #expect(Array(first[1].key.readableBytesView) == binary)
        #expect(String(buffer: first[1].value) == "bin")
        #expect(String(buffer: first[3].value).contains("at most 248 bytes"))

        try await Self.hello(f)
        var aware = ByteBuffer()
        // The named collection's "k" does not exist: the binary key did not land in it.
        var g = Self.request(.get, collection: 8, key: "k", opaque: 5)
        aware.writeBuffer(&g)
        aware.writeRequest(opcode: .getk, vbucket: 0, opaque: 6, key: [0x00] + binary)
        var s = Self.request(.set, collection: 8, key: "k", value: Array("named".utf8), extras: extras, opaque: 7)
        aware.writeBuffer(&s)
        var gk = Self.request(.getk, collection: 8, key: "k", opaque: 8)
        aware.writeBuffer(&gk)
        aware.writeRequest(opcode: .get, vbucket: 0, opaque: 9, key: [0x00] + binary)
        try await f.channel.writeInbound(aware)
        let second = try await f.responses()
        #expect(second.map(\.status) == [.keyNotFound, .success, .success, .success, .success])
        #expect(Array(second[1].key.readableBytesView) == [0x00] + binary)
        #expect(Array(second[3].key.readableBytesView) == [0x08, 0x6b])
        #expect(String(buffer: second[3].value) == "named")
        #expect(String(buffer: second[4].value) == "bin")
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
