import SetteeCore
import Testing

@testable import SetteeSubdoc

private let meta = SubdocItemMetadata(
    cas: 1, vbucketUUID: 2, seqno: 3, revSeqno: 4, expiry: 0, flags: 0, valueBytes: 2, isJSON: true, deleted: false,
    hlcNowNanoseconds: 0, hlcIsLogical: false)

/// The XATTR section stored in front of a body (datatype bit 0x04), as the binary protocol lays it out.
struct XattrBlobTests {
    /// Proves the layout: a value built by hand from the protocol's definition splits into its pairs and
    /// body, and encoding them again gives the same bytes; no attribute means no section at all.
    @Test func splitsAndEncodesTheProtocolLayout() throws {
        let body = bytes(#"{"a":1}"#)
        let stored = section(pair("_sync", #"{"rev":"1-a"}"#), pair("txn", "[1,2]")) + body
        let (blob, rest) = try #require(XattrBlob.split(stored))
        #expect(rest == body)
        #expect(
            blob.pairs == [
                XattrPair(key: bytes("_sync"), value: bytes(#"{"rev":"1-a"}"#)),
                XattrPair(key: bytes("txn"), value: bytes("[1,2]")),
            ])
        #expect(blob.encoded(body: body) == stored)
        #expect(blob.encodedSize == stored.count - body.count)
        #expect(XattrBlob().encoded(body: body) == body)

        var edited = blob
        edited.set(bytes("txn"), to: bytes("3"))
        edited.set(bytes("user"), to: bytes("true"))
        edited.remove(bytes("_sync"))
        #expect(edited.encoded(body: body) == section(pair("txn", "3"), pair("user", "true")) + body)
    }

    /// Proves a malformed section is refused whole (nil), never read past its end: lengths beyond the value,
    /// a pair without its zeros, a duplicate, virtual or invalid name, a value that is not JSON, a section
    /// over `Limits.subdocMaxXattrSize`.
    @Test(arguments: [
        [0, 0, 1],  // shorter than the total length
        u32(100) + pair("a", "1"),  // total beyond the value
        section(u32(50) + bytes("a") + [0] + bytes("1") + [0]),  // pair length beyond the total
        section(u32(3) + bytes("a1") + [0]),  // no zero between key and value
        section(u32(4) + bytes("a") + [0] + bytes("1x")),  // pair not ending in zero
        section(pair("a", "1"), pair("a", "2")),  // duplicate
        section(pair("$document", "1")),  // virtual names are not stored
        section(pair("!x", "1")),  // punctuation
        section(pair("a234567890abcdefg", "1")),  // 17 bytes
        section(pair("a", "{")),  // not JSON
        section(pair("", "1")),  // empty name
        section(pair("a\u{1}", "1")),  // control character
        section(u32(5) + [0x61, 0xff, 0] + bytes("1") + [0]),  // not UTF-8
        u32(Limits.subdocMaxXattrSize + 1) + [UInt8](repeating: 0x20, count: Limits.subdocMaxXattrSize + 1),
    ])
    func malformedSectionsAreRefused(value: [UInt8]) {
        #expect(XattrBlob.split(value) == nil)
    }

    /// Proves random bytes never crash the parser and whatever it accepts encodes back to the same bytes
    /// (an empty section, total length 0, encodes as no section).
    @Test func randomSectionsNeverCrash() {
        var rng = SplitMix64(seed: 20)
        for _ in 0..<5_000 {
            var value = section(pair("a", "1"), pair("_s", #"{"k":[1]}"#)) + bytes("{}")
            for _ in 0..<Int.random(in: 1...4, using: &rng) {
                let i = Int.random(in: 0..<value.count, using: &rng)
                value[i] = UInt8.random(in: 0...255, using: &rng)
            }
            if let (blob, body) = XattrBlob.split(value) {
                #expect(blob.encoded(body: body) == (blob.pairs.isEmpty ? Array(value.dropFirst(4)) : value))
                #expect(blob.pairs.allSatisfy { (try? SubdocXattr.checkName($0.key)) != nil })
            }
        }
    }

    /// Proves a section of as many distinct attributes as `Limits.subdocMaxXattrSize` holds (~200,000 of 10 bytes)
    /// splits in linear time, and that `$XTOC` for a reader without SystemXattrRead over half of them system ones
    /// lists only the user ones. The duplicate check searched every earlier pair and the system ones were removed
    /// one search at a time: 104,000 attributes took 6 s in a release build, on the event loop, from any writer.
    /// Here the whole split and lookup must finish in seconds in a debug build (the quadratic code took minutes).
    @Test func aSectionOfManyAttributesSplitsInLinearTime() throws {
        var pairs: [UInt8] = []
        var n = 0
        while pairs.count + 16 <= Limits.subdocMaxXattrSize {
            pairs += pair((n % 2 == 0 ? "_" : "u") + String(n, radix: 36), "0")
            n += 1
        }
        let stored = u32(pairs.count) + pairs + bytes("{}")
        let clock = ContinuousClock()
        let start = clock.now
        let (blob, body) = try #require(XattrBlob.split(stored))
        #expect(blob.pairs.count == n && n > 150_000)
        let request = try SubdocRequest.decode(opcode: 0xc5, extras: u16(5) + [0x04], value: bytes("$XTOC"))
        let outcome = request.execute(on: body, metadata: meta, xattrs: blob, privileges: [])
        guard case .reply(let status, let listed) = outcome else {
            Issue.record("\(outcome)")
            return
        }
        #expect(status == 0 && listed.count > 0 && !listed.contains(UInt8(ascii: "_")))
        let elapsed = clock.now - start
        #expect(elapsed < .seconds(20), "\(n) attributes took \(elapsed)")
    }

    /// Proves a MULTI_LOOKUP's reply holds the item at most once: 16 whole-document GETs of a 2 MiB document would
    /// answer 32 MiB, past `Limits.subdocMaxLookupResponseBytes`, and get E2BIG with no body; ten of them fit
    /// (20 MiB) and answer every copy. Before, 16 copies of a 20 MiB document (320 MiB) were one reply.
    @Test func aMultiLookupAnswersTheItemAtMostOnceOver() throws {
        let body = bytes("\"" + String(repeating: "y", count: 2 * 1024 * 1024 - 2) + "\"")
        func wholeGets(_ n: Int) throws -> SubdocOutcome {
            let request = try SubdocRequest.decode(
                opcode: 0xd0, extras: [], value: Array([[UInt8]](repeating: [0x00, 0, 0, 0], count: n).joined()))
            return request.execute(on: body, metadata: meta)
        }
        #expect(try wholeGets(Limits.subdocMaxMultiPaths) == .reply(status: SubdocRequest.tooBigStatus, body: []))
        guard case .reply(let status, let reply) = try wholeGets(10) else {
            Issue.record("no reply")
            return
        }
        #expect(status == 0 && reply.count == 10 * (6 + body.count))
    }

    /// Proves lookups read stored attributes: paths inside them, EXISTS, GET_COUNT, `$XTOC` lists the stored
    /// names, a missing attribute is PATH_ENOENT, and body specs still read the body.
    @Test func lookupsReadStoredAttributes() throws {
        let (blob, body) = try #require(
            XattrBlob.split(section(pair("_sync", #"{"rev":"2-b","h":[1,2,3]}"#), pair("txn", "7")) + bytes("{}")))
        func get(_ opcode: UInt8, _ path: String) throws -> SubdocOutcome {
            let request = try SubdocRequest.decode(
                opcode: opcode, extras: u16(path.utf8.count) + [0x04], value: bytes(path))
            return request.execute(on: body, metadata: meta, xattrs: blob)
        }
        #expect(try get(0xc5, "_sync.rev") == .reply(status: 0, body: bytes(#""2-b""#)))
        #expect(try get(0xc5, "_sync.h[-1]") == .reply(status: 0, body: bytes("3")))
        #expect(try get(0xc5, "txn") == .reply(status: 0, body: bytes("7")))
        #expect(try get(0xc6, "txn") == .reply(status: 0, body: []))
        #expect(try get(0xd2, "_sync") == .reply(status: 0, body: bytes("2")))
        #expect(try get(0xc5, "$XTOC") == .reply(status: 0, body: bytes(#"["_sync","txn"]"#)))
        #expect(try get(0xc5, "other") == .reply(status: SubdocError.pathNotFound.rawValue, body: []))
        #expect(try get(0xc5, "_sync.nope") == .reply(status: SubdocError.pathNotFound.rawValue, body: []))
        let multi = try SubdocRequest.decode(
            opcode: 0xd0, extras: [], value: [0xc5, 0x04] + u16(3) + bytes("txn") + [0x00, 0, 0, 0])
        #expect(
            multi.execute(on: body, metadata: meta, xattrs: blob)
                == .reply(status: 0, body: u16(0) + u32(1) + bytes("7") + u16(0) + u32(2) + bytes("{}")))
    }
}
