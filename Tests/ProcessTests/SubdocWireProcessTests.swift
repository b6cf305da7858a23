import Foundation
import NIOCore
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Synchronization
import Testing

/// Sub-document commands and the default collection on a real node's KV port, frame by frame.
@Suite(.serialized, .onTestThreads) struct SubdocWireProcessTests {
    private static func single(_ path: String, flags: UInt8 = 0, docFlags: UInt8? = nil) -> [UInt8] {
        let n = path.utf8.count
        return [UInt8(n >> 8), UInt8(n & 0xff), flags] + (docFlags.map { [$0] } ?? [])
    }

    private static func text(_ frame: Frame) -> String { String(decoding: frame.valueBytes, as: UTF8.self) }

    /// Proves every single-path command over the wire: each answers its status (values for GET, COUNTER and
    /// GET_COUNT), mutations return a new CAS and the 16-byte mutation token when MutationSeqno is agreed, the
    /// document's untouched bytes stay as stored, MKDOC creates a missing document, and a stale CAS is KEY_EEXISTS.
    @Test func singlePathCommands() throws {
        let server = try ServerProcess.started(name: "subdoc-wire")
        defer { server.stopAndRemove() }
        try server.initialize()
        let kv = try TestKVClient(port: server.kvPort)
        try kv.hello([.mutationSeqno, .json, .xerror])
        let original = #"{ "name": "settee",  "tags": ["a"], "n": 1 }"#
        let stored = try kv.request(
            .set, key: "d", value: Array(original.utf8), extras: TestKVClient.setExtras(flags: 0, expiry: 0),
            datatype: 1)
        #expect(stored.status == .success)

        func run(
            _ op: Opcode, _ path: String, _ value: String = "", flags: UInt8 = 0, docFlags: UInt8? = nil,
            key: String = "d", cas: UInt64 = 0
        ) throws -> Frame {
            try kv.request(
                op, key: key, value: Array(path.utf8) + Array(value.utf8),
                extras: Self.single(path, flags: flags, docFlags: docFlags), cas: cas)
        }
        let get = try run(.subdocGet, "name")
        #expect(get.status == .success && Self.text(get) == #""settee""# && get.cas == stored.cas)
        #expect(try run(.subdocExists, "tags").status == .success)
        #expect(try run(.subdocExists, "nope").status == Status(0xc0))
        #expect(try run(.subdocGet, "name.x").status == Status(0xc1))
        #expect(try run(.subdocGet, "a..b").status == Status(0xc2))
        #expect(Self.text(try run(.subdocGetCount, "tags")) == "1")

        let upsert = try run(.subdocDictUpsert, "x.y", "true", flags: 0x01)
        #expect(upsert.status == .success && upsert.cas != stored.cas && upsert.mutationToken != nil)
        #expect(try run(.subdocDictAdd, "name", #""x""#).status == Status(0xc9))
        #expect(try run(.subdocReplace, "n", "2").status == .success)
        #expect(try run(.subdocArrayPushLast, "tags", #""c""#).status == .success)
        #expect(try run(.subdocArrayPushFirst, "tags", #""0""#).status == .success)
        #expect(try run(.subdocArrayInsert, "tags[1]", #""i""#).status == .success)
        #expect(try run(.subdocArrayAddUnique, "tags", #""a""#).status == Status(0xc9))
        let counter = try run(.subdocCounter, "n", "40")
        #expect(counter.status == .success && Self.text(counter) == "42")
        #expect(try run(.subdocDelete, "x").status == .success)
        #expect(try run(.subdocCounter, "n", "0").status == Status(0xc8))
        #expect(try run(.subdocReplace, "n", "3", cas: stored.cas).status == .keyExists)
        let after = try kv.request(.get, key: "d")
        #expect(Self.text(after) == #"{ "name": "settee",  "tags": ["0","i","a","c"], "n": 42 }"#)

        #expect(try run(.subdocDictUpsert, "k", "1", key: "missing").status == .keyNotFound)
        #expect(try run(.subdocDictUpsert, "k.l", "1", docFlags: 0x01, key: "made").status == .success)
        #expect(Self.text(try kv.request(.get, key: "made")) == #"{"k":{"l":1}}"#)
        #expect(try run(.subdocGet, "a", key: "missing").status == .keyNotFound)
    }

    /// Proves XATTR paths reach the client as the binary protocol defines: `$document` fields of the stored
    /// item (CAS as the response's CAS in hex, flags), XATTR_UNKNOWN_VATTR (0xd1) for an unknown virtual
    /// attribute, PATH_ENOENT for a user attribute, SUBDOC_INVALID_XATTR_ORDER (0xd4) for a MULTI_LOOKUP with
    /// an XATTR spec after a body spec, XATTR_CANT_MODIFY_VATTR (0xd2) for a mutation of `$document`.
    @Test func xattrPaths() throws {
        let server = try ServerProcess.started(name: "subdoc-wire-xattr")
        defer { server.stopAndRemove() }
        try server.initialize()
        let kv = try TestKVClient(port: server.kvPort)
        try kv.hello([.json, .xerror])
        let stored = try kv.request(
            .set, key: "d", value: Array(#"{"a":1}"#.utf8), extras: TestKVClient.setExtras(flags: 6, expiry: 0),
            datatype: 1)
        #expect(stored.status == .success)
        func get(_ path: String, _ op: Opcode = .subdocGet) throws -> Frame {
            try kv.request(op, key: "d", value: Array(path.utf8), extras: Self.single(path, flags: 0x04))
        }
        let cas = try get("$document.CAS")
        let hex = String(stored.cas, radix: 16)
        #expect(
            cas.status == .success && Self.text(cas) == "\"0x\(String(repeating: "0", count: 16 - hex.count))\(hex)\"")
        #expect(Self.text(try get("$document.flags")) == "6")
        #expect(Self.text(try get("$document.value_bytes")) == "7")
        #expect(try get("$nope").status == Status(0xd1))
        #expect(try get("user").status == Status(0xc0))
        func spec(_ path: String, flags: UInt8) -> [UInt8] {
            [0xc5, flags, 0, UInt8(path.utf8.count)] + Array(path.utf8)
        }
        let misordered = try kv.request(
            .subdocMultiLookup, key: "d", value: spec("a", flags: 0) + spec("$document", flags: 0x04))
        #expect(misordered.status == Status(0xd4))
        let ordered = try kv.request(
            .subdocMultiLookup, key: "d", value: spec("$document.flags", flags: 0x04) + spec("a", flags: 0))
        #expect(ordered.status == .success && ordered.valueBytes == [0, 0, 0, 0, 0, 1, 54, 0, 0, 0, 0, 0, 1, 49])
        let path = "$document.x"
        let vattrWrite = try kv.request(
            .subdocDictUpsert, key: "d", value: Array(path.utf8) + Array("1".utf8),
            extras: Self.single(path, flags: 0x04))
        #expect(vattrWrite.status == Status(0xd2))
    }

    /// Proves the collection-aware path: with Collections agreed, keys prefixed with the default collection's
    /// id (0) reach their documents, any other id is UNKNOWN_COLLECTION (0x88); GET_COLLECTION_ID resolves
    /// `_default._default` (and the empty shorthand) to id 0 and refuses named scopes (0x8c) and collections
    /// (0x88); the manifest over KV and the admin API's `scopes` route list `_default._default` only.
    @Test func defaultCollectionOnly() throws {
        let server = try ServerProcess.started(name: "subdoc-collections")
        defer { server.stopAndRemove() }
        try server.initialize()
        let kv = try TestKVClient(port: server.kvPort)
        try kv.hello([.collections, .json])
        let vb = VBucketHash.vbucket(forKey: Array("doc".utf8)).rawValue
        let set = try kv.request(
            .set, key: "\u{0}doc", value: Array(#"{"a":1}"#.utf8), extras: TestKVClient.setExtras(flags: 0, expiry: 0),
            vbucket: vb)
        #expect(set.status == .success)
        let got = try kv.request(.get, key: "\u{0}doc", vbucket: vb)
        #expect(got.status == .success && Self.text(got) == #"{"a":1}"#)
        let subdoc = try kv.request(
            .subdocGet, key: "\u{0}doc", value: Array("a".utf8), extras: Self.single("a"), vbucket: vb)
        #expect(subdoc.status == .success && Self.text(subdoc) == "1")
        #expect(try kv.request(.get, key: "\u{8}doc", vbucket: vb).status == .unknownCollection)

        let id = try kv.request(.getCollectionID, value: Array("_default._default".utf8))
        #expect(id.status == .success && Array(id.extras.readableBytesView) == [UInt8](repeating: 0, count: 12))
        #expect(try kv.request(.getCollectionID, value: Array(".".utf8)).status == .success)
        #expect(try kv.request(.getCollectionID, value: Array("s1.c1".utf8)).status == .unknownScope)
        #expect(try kv.request(.getCollectionID, value: Array("_default.c1".utf8)).status == .unknownCollection)
        let manifest = try kv.request(.getCollectionsManifest)
        #expect(manifest.status == .success && manifest.valueBytes == CollectionsManifest.initial.json)

        let scopes = try server.http("GET", "/pools/default/buckets/demo/scopes")
        #expect(scopes.status == 200 && scopes.text.contains(#""name":"_default""#))
        #expect(try server.http("GET", "/pools/default/buckets/nope/scopes").status == 404)
    }

    /// Proves RBAC on sub-document commands: a `data_reader` may run lookups (single and multi-path) but each
    /// mutation is refused with EACCESS (0x24) and leaves the document as it was; a `data_writer` may mutate.
    @Test func lookupsNeedReadMutationsNeedWrite() throws {
        let server = try ServerProcess.started(name: "subdoc-rbac")
        defer { server.stopAndRemove() }
        try server.initialize(authType: "sasl")
        for (user, role) in [("reader", "data_reader[demo]"), ("writer", "data_writer[demo]")] {
            let put = try server.http(
                "PUT", "/settings/rbac/users/local/\(user)", form: [("password", "\(user)-pw"), ("roles", role)])
            #expect(put.status == 200, "\(put.text)")
        }
        let admin = try TestKVClient(port: server.kvPort)
        #expect(try admin.authenticate(user: server.user, password: server.password) == .success)
        #expect(try admin.request(.selectBucket, key: "demo").status == .success)
        let stored = try admin.request(
            .set, key: "d", value: Array(#"{"n":1}"#.utf8), extras: TestKVClient.setExtras(flags: 0, expiry: 0))
        #expect(stored.status == .success)

        let reader = try TestKVClient(port: server.kvPort)
        #expect(try reader.authenticate(user: "reader", password: "reader-pw") == .success)
        #expect(try reader.request(.selectBucket, key: "demo").status == .success)
        let get = try reader.request(.subdocGet, key: "d", value: Array("n".utf8), extras: Self.single("n"))
        #expect(get.status == .success && Self.text(get) == "1")
        let multi = try reader.request(.subdocMultiLookup, key: "d", value: [0xc5, 0, 0, 1] + Array("n".utf8))
        #expect(multi.status == .success)
        let counter = try reader.request(
            .subdocCounter, key: "d", value: Array("n1".utf8), extras: Self.single("n"))
        #expect(counter.status == .accessDenied)
        let multiMutation = try reader.request(
            .subdocMultiMutation, key: "d", value: [0xc8, 0, 0, 1, 0, 0, 0, 1] + Array("n2".utf8))
        #expect(multiMutation.status == .accessDenied)
        #expect(Self.text(try admin.request(.get, key: "d")) == #"{"n":1}"#)

        let writer = try TestKVClient(port: server.kvPort)
        #expect(try writer.authenticate(user: "writer", password: "writer-pw") == .success)
        #expect(try writer.request(.selectBucket, key: "demo").status == .success)
        let written = try writer.request(
            .subdocCounter, key: "d", value: Array("n1".utf8), extras: Self.single("n"))
        #expect(written.status == .success && Self.text(written) == "2")
    }

    /// Proves concurrent sub-document mutations of one document lose nothing: four connections on two event
    /// loops each send 200 COUNTER increments to the same path; every one is acknowledged (a store that loses the
    /// race to another connection's write re-reads and re-applies itself instead of failing or overwriting) and
    /// the counter ends at exactly 800.
    @Test func concurrentCountersLoseNothing() throws {
        let server = try ServerProcess(name: "subdoc-concurrent")
        server.extraArguments = ["--kv-threads", "2"]
        try server.start()
        defer { server.stopAndRemove() }
        try server.initialize()
        let setup = try TestKVClient(port: server.kvPort)
        let created = try setup.request(
            .set, key: "c", value: Array(#"{"n":0,"pad":"x"}"#.utf8),
            extras: TestKVClient.setExtras(flags: 0, expiry: 0))
        #expect(created.status == .success)
        let port = server.kvPort
        let failures = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            do {
                let kv = try TestKVClient(port: port)
                for _ in 0..<200 {
                    let r = try kv.request(.subdocCounter, key: "c", value: Array("n1".utf8), extras: Self.single("n"))
                    if r.status != .success { failures.withLock { $0.append("\(r.status)") } }
                }
            } catch {
                failures.withLock { $0.append("\(error)") }
            }
        }
        #expect(failures.withLock { $0 }.isEmpty)
        #expect(Self.text(try setup.request(.get, key: "c")) == #"{"n":800,"pad":"x"}"#)
    }
}
