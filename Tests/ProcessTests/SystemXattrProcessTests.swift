import Foundation
import SetteeCore
import SetteeProtocol
import SetteeTestSupport
import Testing

/// System XATTR privileges and the create-as-deleted / revive document flags on a real node's KV port (ADR 0029).
@Suite(.serialized, .onTestThreads) struct SystemXattrProcessTests {
    /// One MULTI_MUTATION spec: opcode, path flags, path length, value length, path, value.
    private static func spec(_ opcode: UInt8, _ path: String, _ value: String, flags: UInt8 = 0x04) -> [UInt8] {
        let p = Array(path.utf8)
        let v = Array(value.utf8)
        let n = UInt32(v.count)
        return [opcode, flags, UInt8(p.count >> 8), UInt8(p.count & 0xff)]
            + [UInt8(n >> 24), UInt8((n >> 16) & 0xff), UInt8((n >> 8) & 0xff), UInt8(n & 0xff)] + p + v
    }

    private static func bigEndian(_ n: UInt32) -> [UInt8] {
        [UInt8(n >> 24), UInt8((n >> 16) & 0xff), UInt8((n >> 8) & 0xff), UInt8(n & 0xff)]
    }

    private static func lookup(_ path: String, flags: UInt8 = 0x04) -> [UInt8] {
        let p = Array(path.utf8)
        return [0xc5, flags, UInt8(p.count >> 8), UInt8(p.count & 0xff)] + p
    }

    private static func login(_ server: ServerProcess, _ user: String, _ password: String) throws -> TestKVClient {
        let kv = try TestKVClient(port: server.kvPort)
        try kv.hello([.xattr, .json, .xerror])
        #expect(try kv.authenticate(user: user, password: password) == .success)
        #expect(try kv.request(.selectBucket, key: "demo").status == .success)
        return kv
    }

    /// Initialises `server` with a SASL bucket `demo` and logs in its two users: `app` (data_reader + data_writer,
    /// an SDK application) and `sgw` (mobile_sync_gateway, the gateway's credentials).
    static func appAndGateway(_ server: ServerProcess) throws -> (app: TestKVClient, sgw: TestKVClient) {
        try server.initialize(authType: "sasl")
        for (user, roles) in [("app", "data_reader[demo],data_writer[demo]"), ("sgw", "mobile_sync_gateway[demo]")] {
            let put = try server.http(
                "PUT", "/settings/rbac/users/local/\(user)", form: [("password", "\(user)-pw"), ("roles", roles)])
            #expect(put.status == 200, "\(put.text)")
        }
        return (try login(server, "app", "app-pw"), try login(server, "sgw", "sgw-pw"))
    }

    /// Proves: (1) a `data_reader`+`data_writer` user cannot write `_sync` (EACCESS for the request, sub-document
    /// or a SET carrying it in an XATTR section) but can write a user XATTR, and reading `_sync` fails that path
    /// only (EACCESS) while `$document` reads; (2) a `mobile_sync_gateway` user (the gateway's credentials)
    /// writes `_sync`; (3) CREATE_AS_DELETED makes a tombstone holding `_sync` (GET: not found, ACCESS_DELETED
    /// reads it with SUCCESS_DELETED), REVIVE_DOCUMENT brings it back with a body, and a second revive of the now
    /// live document is SUBDOC_CAN_ONLY_REVIVE_DELETED_DOCUMENTS (0xd6).
    @Test func systemXattrsNeedTheirPrivilegesAndTombstonesAreCreatedAndRevived() throws {
        let server = try ServerProcess.started(name: "sys-xattr")
        defer { server.stopAndRemove() }
        let (app, sgw) = try Self.appAndGateway(server)
        let set = try app.request(
            .set, key: "d", value: Array(#"{"v":1}"#.utf8), extras: TestKVClient.setExtras(flags: 0, expiry: 0),
            datatype: 1)
        #expect(set.status == .success)

        // (1) The application's user.
        let denied = try app.request(.subdocMultiMutation, key: "d", value: Self.spec(0xc8, "_sync", #"{"rev":"x"}"#))
        #expect(denied.status == .accessDenied, "\(denied.status)")
        let user = try app.request(.subdocMultiMutation, key: "d", value: Self.spec(0xc8, "meta", #"{"a":1}"#))
        #expect(user.status == .success, "\(user.status)")
        let section: [UInt8] = [0, 0, 0, 14, 0, 0, 0, 10] + Array("_sync".utf8) + [0] + Array("\"x\"".utf8) + [0]
        let rawSet = try app.request(
            .set, key: "d", value: section + Array("{}".utf8), extras: TestKVClient.setExtras(flags: 0, expiry: 0),
            datatype: 0x05)
        #expect(rawSet.status == .accessDenied, "\(rawSet.status)")

        // (2) The gateway's user writes `_sync`; the application's user cannot read it but reads `$document`.
        let wrote = try sgw.request(.subdocMultiMutation, key: "d", value: Self.spec(0xc8, "_sync", #"{"rev":"1-a"}"#))
        #expect(wrote.status == .success, "\(wrote.status)")
        let read = try app.request(
            .subdocMultiLookup, key: "d", value: Self.lookup("_sync") + Self.lookup("$document.deleted"))
        #expect(read.status == Status(0xcc), "\(read.status)")
        let bytes = read.valueBytes
        #expect(bytes.count >= 6 && bytes[0] == 0 && bytes[1] == 0x24 && bytes[6] == 0 && bytes[7] == 0)
        let seen = try sgw.request(.subdocMultiLookup, key: "d", value: Self.lookup("_sync.rev"))
        #expect(seen.status == .success && String(decoding: seen.valueBytes.dropFirst(6), as: UTF8.self) == "\"1-a\"")

        // (3) Create-as-deleted (ADD | ACCESS_DELETED | CREATE_AS_DELETED), then revive (ACCESS_DELETED | REVIVE).
        let created = try sgw.request(
            .subdocMultiMutation, key: "t", value: Self.spec(0xc8, "_sync", #"{"rev":"1-d"}"#), extras: [0x0e])
        #expect(created.status == .success, "\(created.status)")
        #expect(try sgw.request(.get, key: "t").status == .keyNotFound)
        let tomb = try sgw.request(.subdocMultiLookup, key: "t", value: Self.lookup("_sync.rev"), extras: [0x04])
        #expect(tomb.status == Status(0xcd), "\(tomb.status)")
        #expect(String(decoding: tomb.valueBytes.dropFirst(6), as: UTF8.self) == "\"1-d\"")
        let again = try sgw.request(
            .subdocMultiMutation, key: "t", value: Self.spec(0xc8, "_sync", "{}"), extras: [0x0e])
        #expect(again.status == .success, "a tombstone is edited by ADD | CREATE_AS_DELETED: \(again.status)")
        let revive =
            Self.spec(0xc8, "_sync", #"{"rev":"2-e"}"#) + Self.spec(0x01, "", #"{"back":true}"#, flags: 0)
        let revived = try sgw.request(.subdocMultiMutation, key: "t", value: revive, extras: [0x14])
        #expect(revived.status == .success, "\(revived.status)")
        let body = try sgw.request(.get, key: "t")
        #expect(body.status == .success && String(decoding: body.valueBytes, as: UTF8.self) == #"{"back":true}"#)
        let twice = try sgw.request(.subdocMultiMutation, key: "t", value: revive, extras: [0x14])
        #expect(twice.status == Status(0xd6), "\(twice.status)")
    }

    /// Proves (ADR 0029 amendment): a SET carrying its own XATTR section (datatype JSON | XATTR) from a
    /// `data_reader`+`data_writer` user replaces the user attributes but keeps `_sync`, which only the gateway's
    /// `mobile_sync_gateway` user may write or remove; the same SET from that user replaces the section whole.
    @Test func anUnprivilegedXattrSetKeepsSystemXattrs() throws {
        let server = try ServerProcess.started(name: "sys-xattr-keep")
        defer { server.stopAndRemove() }
        let (app, sgw) = try Self.appAndGateway(server)
        let extras = TestKVClient.setExtras(flags: 0, expiry: 0)
        #expect(
            try app.request(.set, key: "d", value: Array(#"{"v":1}"#.utf8), extras: extras, datatype: 1).status
                == .success)
        let wrote = try sgw.request(
            .subdocMultiMutation, key: "d",
            value: Self.spec(0xc8, "_sync", #"{"rev":"1-a"}"#) + Self.spec(0xc8, "old", "1"))
        #expect(wrote.status == .success, "\(wrote.status)")

        // The application's SET with a section of its own: user attribute `meta`, body `{"v":2}`.
        let section: [UInt8] = [0, 0, 0, 14, 0, 0, 0, 10] + Array("meta".utf8) + [0] + Array("true".utf8) + [0]
        let set = try app.request(
            .set, key: "d", value: section + Array(#"{"v":2}"#.utf8), extras: extras, datatype: 0x05)
        #expect(set.status == .success, "\(set.status)")
        let sync = try sgw.request(.subdocMultiLookup, key: "d", value: Self.lookup("_sync.rev"))
        #expect(sync.status == .success && String(decoding: sync.valueBytes.dropFirst(6), as: UTF8.self) == "\"1-a\"")
        let names = try sgw.request(.subdocMultiLookup, key: "d", value: Self.lookup("$XTOC"))
        #expect(String(decoding: names.valueBytes.dropFirst(6), as: UTF8.self) == #"["_sync","meta"]"#)
        let body = try app.request(.get, key: "d")
        #expect(String(decoding: body.valueBytes, as: UTF8.self) == #"{"v":2}"#)

        // A section whose user attributes pass their 1 MiB is E2BIG, as from a sub-document mutation; the document
        // is untouched.
        let big = Array("\"".utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: Limits.subdocMaxUserXattrSize) + [34]
        let pairLength = UInt32(4 + 1 + big.count + 1)
        let bigSection =
            Self.bigEndian(pairLength + 4) + Self.bigEndian(pairLength) + Array("meta".utf8) + [0] + big + [0]
        let tooBig = try app.request(
            .set, key: "d", value: bigSection + Array("{}".utf8), extras: extras, datatype: 0x05)
        #expect(tooBig.status == .valueTooLarge, "\(tooBig.status)")
        #expect(String(decoding: try app.request(.get, key: "d").valueBytes, as: UTF8.self) == #"{"v":2}"#)

        // The gateway's user may replace the whole section, `_sync` included.
        let replaced = try sgw.request(
            .set, key: "d", value: section + Array("{}".utf8), extras: extras, datatype: 0x05)
        #expect(replaced.status == .success, "\(replaced.status)")
        let gone = try sgw.request(.subdocMultiLookup, key: "d", value: Self.lookup("$XTOC"))
        #expect(String(decoding: gone.valueBytes.dropFirst(6), as: UTF8.self) == #"["meta"]"#)
    }
}
