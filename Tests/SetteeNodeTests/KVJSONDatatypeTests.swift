import Foundation
import NIOCore
import NIOEmbedded
import SetteeCore
import SetteeProtocol
import SetteeRegistry
import SetteeStorage
import Testing

@testable import SetteeNode

/// The KV port sets the JSON datatype bit itself, from the bytes a client stores, as Couchbase Server does (issue 67
/// item 10): whatever the request's datatype said and whether the connection negotiated JSON, on SET / ADD / REPLACE
/// (of a body alone, or of a body behind an XATTR section) and on the result of APPEND / PREPEND. Driven through
/// the handler in-process (`KVHandlerChannelTests.Fixture`); the stored datatype is read from the engine.
@Suite(.serialized) struct KVJSONDatatypeTests {
    typealias Fixture = KVHandlerChannelTests.Fixture

    static let setExtras: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0]

    /// One request through the handler and its one response.
    static func send(
        _ f: Fixture, _ opcode: Opcode, key: String, value: [UInt8] = [], extras: [UInt8] = [], datatype: UInt8 = 0
    ) async throws -> Frame {
        var b = ByteBuffer()
        let keyBytes = Array(key.utf8)
        b.writeRequest(
            opcode: opcode, vbucket: VBucketHash.vbucket(forKey: keyBytes, count: 4).rawValue, opaque: 7,
            datatype: datatype, extras: extras, key: keyBytes, value: value)
        try await f.channel.writeInbound(b)
        let frames = try await f.responses()
        try #require(frames.count == 1)
        return frames[0]
    }

    static func hello(_ f: Fixture, _ features: [HelloFeature]) async throws {
        let value = features.flatMap { [UInt8($0.rawValue >> 8), UInt8($0.rawValue & 0xff)] }
        let r = try await send(f, .hello, key: "kv-json-datatype", value: value)
        #expect(r.status == .success)
    }

    /// The datatype the engine holds for `key`.
    static func stored(_ f: Fixture, _ key: String) throws -> Datatype {
        let engine = try #require(f.registry.bucket(named: bucketName))
        let keyBytes = Array(key.utf8)
        return try engine.getMeta(VBucketHash.vbucket(forKey: keyBytes, count: 4), keyBytes).datatype
    }

    /// An XATTR section holding one attribute (`docs/internals/storage-format.md`: lengths big-endian).
    static func section(_ name: String, _ json: String) -> [UInt8] {
        let pair = Array(name.utf8) + [0] + Array(json.utf8) + [0]
        func be32(_ n: Int) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: n >> (24 - 8 * $0)) } }
        return be32(4 + pair.count) + be32(pair.count) + pair
    }

    /// Bodies and whether each is one JSON text.
    static let bodies: [(String, Bool)] = [
        (#"{"a":1}"#, true), (#" [1, "two", {"3": null}] "#, true), ("42", true), (#""text""#, true), ("true", true),
        ("{\"caf\u{e9}\":\"\u{1F600}\"}", true), ("hello", false), (#"{"a":"#, false), (#"{"a":1}x"#, false),
        ("", false), ("01", false), (#"{"a":1,}"#, false),
    ]

    /// Proves a client that never said HELLO (so negotiated no JSON) and sends datatype raw gets the JSON bit for
    /// every JSON body it stores with SET, ADD and REPLACE, and raw for everything else; its own GET still answers
    /// datatype 0, since it did not negotiate JSON.
    @Test func aClientWithoutJSONGetsTheBitForJSONBodies() async throws {
        let f = try await Fixture(open: true)
        for (n, (body, isJSON)) in Self.bodies.enumerated() {
            let expected: Datatype = isJSON ? .json : .raw
            let set = try await Self.send(f, .set, key: "s\(n)", value: Array(body.utf8), extras: Self.setExtras)
            #expect(set.status == .success)
            #expect(try Self.stored(f, "s\(n)") == expected, "SET \(body)")
            let add = try await Self.send(f, .add, key: "a\(n)", value: Array(body.utf8), extras: Self.setExtras)
            #expect(add.status == .success)
            #expect(try Self.stored(f, "a\(n)") == expected, "ADD \(body)")
            // REPLACE over a document of the other kind: the bit follows the new body.
            let other = Array((isJSON ? "raw" : "{}").utf8)
            _ = try await Self.send(f, .set, key: "r\(n)", value: other, extras: Self.setExtras)
            let replace = try await Self.send(
                f, .replace, key: "r\(n)", value: Array(body.utf8), extras: Self.setExtras)
            #expect(replace.status == .success)
            #expect(try Self.stored(f, "r\(n)") == expected, "REPLACE \(body)")
            let get = try await Self.send(f, .get, key: "s\(n)")
            #expect(get.status == .success && get.datatype == 0)
        }
        await f.finish()
    }

    /// Proves the bit follows the bytes on a connection that negotiated JSON too: a JSON body sent as raw is stored
    /// JSON, and a body sent as JSON that is not JSON is stored raw (the server does not trust the request's bit, as
    /// kv_engine); GET on that connection answers the stored bit.
    @Test func theBitFollowsTheBytesWhateverTheRequestSaid() async throws {
        let f = try await Fixture(open: true)
        try await Self.hello(f, [.json])
        _ = try await Self.send(f, .set, key: "j", value: Array(#"{"a":1}"#.utf8), extras: Self.setExtras)
        _ = try await Self.send(
            f, .set, key: "n", value: Array(#"{"a":"#.utf8), extras: Self.setExtras, datatype: 0x01)
        #expect(try Self.stored(f, "j") == .json)
        #expect(try Self.stored(f, "n") == .raw)
        #expect(try await Self.send(f, .get, key: "j").datatype == 0x01)
        #expect(try await Self.send(f, .get, key: "n").datatype == 0)
        await f.finish()
    }

    /// Proves APPEND and PREPEND recompute the bit from the whole result: halves that make a JSON text set it, a
    /// JSON document made not JSON loses it, and a document with an XATTR section is judged by its body alone.
    @Test func appendAndPrependRecomputeTheBit() async throws {
        let f = try await Fixture(open: true)
        func store(_ key: String, _ body: String) async throws {
            #expect(
                try await Self.send(f, .set, key: key, value: Array(body.utf8), extras: Self.setExtras).status
                    == .success)
        }
        try await store("halves", #"{"a":"#)
        #expect(try Self.stored(f, "halves") == .raw)
        #expect(try await Self.send(f, .append, key: "halves", value: Array("1}".utf8)).status == .success)
        #expect(try Self.stored(f, "halves") == .json)

        try await store("spoilt", "{}")
        #expect(try await Self.send(f, .append, key: "spoilt", value: Array("{}".utf8)).status == .success)
        #expect(try Self.stored(f, "spoilt") == .raw)

        try await store("front", "2]")
        #expect(try await Self.send(f, .prepend, key: "front", value: Array("[1,".utf8)).status == .success)
        #expect(try Self.stored(f, "front") == .json)
        #expect(try await Self.send(f, .prepend, key: "front", value: Array("x".utf8)).status == .success)
        #expect(try Self.stored(f, "front") == .raw)

        try await Self.hello(f, [.json, .xattr])
        let xattrSET = try await Self.send(
            f, .set, key: "x", value: Self.section("meta", #"{"by":"app"}"#) + Array("[1".utf8),
            extras: Self.setExtras, datatype: 0x04)
        #expect(xattrSET.status == .success)
        #expect(try Self.stored(f, "x") == .xattr)
        #expect(try await Self.send(f, .append, key: "x", value: Array("]".utf8)).status == .success)
        #expect(try Self.stored(f, "x") == [.json, .xattr])
        await f.finish()
    }

    /// Proves a value with an XATTR section gets the bit of its body (the section is never JSON), with or without
    /// the JSON bit on the request, and a body stored alone over a document with attributes keeps them and gets the
    /// bit of its own bytes.
    @Test func anXattrValueGetsTheBitOfItsBody() async throws {
        let f = try await Fixture(open: true)
        try await Self.hello(f, [.xattr])
        let attrs = Self.section("meta", #"{"by":"app"}"#)
        _ = try await Self.send(
            f, .set, key: "d", value: attrs + Array(#"{"a":1}"#.utf8), extras: Self.setExtras, datatype: 0x04)
        #expect(try Self.stored(f, "d") == [.json, .xattr])
        _ = try await Self.send(
            f, .set, key: "e", value: attrs + Array("plain".utf8), extras: Self.setExtras, datatype: 0x05)
        #expect(try Self.stored(f, "e") == .xattr)
        // A body alone keeps the document's section (ADR 0029).
        _ = try await Self.send(f, .set, key: "e", value: Array("[true]".utf8), extras: Self.setExtras)
        #expect(try Self.stored(f, "e") == [.json, .xattr])
        _ = try await Self.send(f, .set, key: "d", value: Array("plain".utf8), extras: Self.setExtras)
        #expect(try Self.stored(f, "d") == .xattr)
        await f.finish()
    }

    /// Proves a Snappy-compressed value (datatype 0x02, a feature this node never acknowledges) is refused with
    /// EINVAL and stores nothing, whether its inflated bytes would be JSON or not: no bit is guessed from bytes the
    /// node cannot read.
    @Test func snappyValuesAreRefused() async throws {
        let f = try await Fixture(open: true)
        try await Self.hello(f, [.json, .snappy])
        // Snappy's encoding of `{"a":1}`: the length, then one literal of seven bytes.
        let compressed: [UInt8] = [0x07, 0x18] + Array(#"{"a":1}"#.utf8)
        for datatype: UInt8 in [0x02, 0x03] {
            let r = try await Self.send(
                f, .set, key: "z", value: compressed, extras: Self.setExtras, datatype: datatype)
            #expect(r.status == .invalidArguments)
        }
        #expect(throws: EngineError.keyNotFound) { try Self.stored(f, "z") }
        await f.finish()
    }
}
