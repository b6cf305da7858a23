import Testing

@testable import SetteeSubdoc

private let document = bytes(#"{"name":"settee","tags":["a"],"n":1}"#)

/// The wire forms of single-path and multi-path requests decode as kv_engine lays them out, malformed
/// ones are refused as a whole (EINVAL, INVALID_COMBO, EINVAL for misused tombstone flags), and running a request
/// gives the response bodies and statuses the SDKs parse (per-spec results, MULTI_PATH_FAILURE).
@Suite struct SubdocRequestTests {
    @Test func singlePathDecodes() throws {
        let extras: [UInt8] = u16(3) + [0x01] + u32(60) + [0x01]
        let request = try SubdocRequest.decode(opcode: 0xc8, extras: extras, value: bytes("a.b42"))
        #expect(request.isMutation && !request.isMulti)
        #expect(request.expiry == 60)
        #expect(request.docFlags == .mkdoc)
        #expect(
            request.specs == [
                SubdocSpec(operation: .command(.dictUpsert), flags: .mkdirP, path: bytes("a.b"), value: bytes("42"))
            ])
    }

    /// Shapes refused before the document is read, with the status a client gets.
    @Test(arguments: [
        (UInt8(0xc5), [UInt8](u16(1) + [0]), bytes("ab"), SubdocRequestError.invalidArguments),  // lookup with a value
        (0xc5, u16(1) + [0] + u32(5), bytes("a"), .invalidArguments),  // lookup with an expiry
        (0xc5, u16(9) + [0], bytes("a"), .invalidArguments),  // path longer than the body
        (0xc5, [0, 1], bytes("a"), .invalidArguments),  // extras too short
        (0xc5, u16(1) + [0x01], bytes("a"), .invalidArguments),  // MKDIR_P on a lookup
        (0xc8, u16(1) + [0x02], bytes("a1"), .invalidArguments),  // unknown path flag
        (0xc8, u16(1) + [0, 0x03], bytes("a1"), .invalidArguments),  // MKDOC with ADD
        (0xc8, u16(1) + [0x10], bytes("a1"), .xattrInvalidFlagCombination),  // EXPAND_MACROS on a body path
        (0xc8, u16(9) + [0x04], bytes("$document1"), .cannotModifyVirtualAttribute),
        (0xc5, u16(9) + [0x14], bytes("$document"), .xattrInvalidFlagCombination),  // EXPAND_MACROS, lookup
        (0xd0, [], lookupSpec(0xc5, "a") + lookupSpec(0xc5, "$document", flags: 0x04), .invalidXattrOrder),
        (0xd0, [], [0x00, 0x04, 0, 0], .invalidArguments),  // whole-document GET with the XATTR flag
        (0xc8, u16(2) + [0x04, 0x0f], bytes("_a1"), .invalidArguments),  // create as deleted, ADD and MKDOC
        (0xc8, u16(2) + [0x04, 0x09], bytes("_a1"), .invalidArguments),  // create as deleted, no ACCESS_DELETED
        (0xc8, u16(2) + [0x04, 0x0c], bytes("_a1"), .invalidArguments),  // create as deleted, no MKDOC/ADD
        (0xc8, u16(1) + [0, 0x0d], bytes("a1"), .invalidArguments),  // create as deleted, a body path
        (0xd1, [0x0e], mutationSpec(0x01, "", "{}"), .invalidArguments),  // create as deleted, a body SET
        (0xd1, [0x10], mutationSpec(0xc8, "_a", "1", flags: 0x04), .invalidArguments),  // revive, no ACCESS_DELETED
        (0xd1, [0x1e], mutationSpec(0xc8, "_a", "1", flags: 0x04), .invalidArguments),  // revive + create deleted
        (0xd0, [0x14], lookupSpec(0xc5, "_a", flags: 0x04), .invalidArguments),  // revive on a lookup
        (0xd0, [], [], .invalidCombination),  // no specs
        (0xd0, [], lookupSpec(0xc8, "a"), .invalidCombination),  // a mutation inside a lookup
        (0xd1, [], mutationSpec(0xc5, "a", ""), .invalidCombination),  // a lookup inside a mutation
        (0xd0, [], Array(lookupSpec(0xc5, "a").dropLast()), .invalidArguments),  // truncated spec
        (0xd1, [], mutationSpec(0x04, "", "") + mutationSpec(0xc8, "a", "1"), .invalidCombination),
        (0xd1, [], mutationSpec(0xc8, "a", "1") + mutationSpec(0x04, "", ""), .invalidCombination),  // body, delete
        (0xd1, [], mutationSpec(0x04, "", "") + mutationSpec(0xc8, "_x", "1", flags: 0x04), .invalidCombination),
        (0xd0, [], lookupSpec(0x00, "a"), .invalidArguments),  // whole-document get with a path
        (0xd1, [0, 0], [], .invalidArguments),  // bad multi-mutation extras
    ])
    func refused(opcode: UInt8, extras: [UInt8], value: [UInt8], error: SubdocRequestError) {
        #expect(throws: error) { try SubdocRequest.decode(opcode: opcode, extras: extras, value: value) }
    }

    @Test func tooManySpecs() {
        let seventeen = (0..<17).flatMap { _ in lookupSpec(0xc5, "n") }
        #expect(throws: SubdocRequestError.invalidCombination) {
            try SubdocRequest.decode(opcode: 0xd0, extras: [], value: seventeen)
        }
        let sixteen = (0..<16).flatMap { _ in lookupSpec(0xc5, "n") }
        #expect(throws: Never.self) { try SubdocRequest.decode(opcode: 0xd0, extras: [], value: sixteen) }
    }

    /// MULTI_LOOKUP answers every spec (status, length, value), MULTI_PATH_FAILURE when one failed.
    @Test func multiLookup() throws {
        let value =
            lookupSpec(0xc5, "name") + lookupSpec(0xc5, "nope") + lookupSpec(0xc6, "tags") + lookupSpec(0xd2, "tags")
            + lookupSpec(0x00, "") + lookupSpec(0xc5, "a..b")
        let request = try SubdocRequest.decode(opcode: 0xd0, extras: [], value: value)
        let expected: [UInt8] =
            u16(0) + u32(8) + bytes(#""settee""#) + u16(0xc0) + u32(0) + u16(0) + u32(0) + u16(0) + u32(1) + bytes("1")
            + u16(0) + u32(document.count) + document + u16(0xc2) + u32(0)
        #expect(request.execute(on: document) == .reply(status: 0xcc, body: expected))
        let ok = try SubdocRequest.decode(opcode: 0xd0, extras: [], value: lookupSpec(0xc5, "n"))
        #expect(ok.execute(on: document) == .reply(status: 0, body: u16(0) + u32(1) + bytes("1")))
        #expect(ok.execute(on: nil) == .reply(status: 0x01, body: []))
        // A body that is not JSON fails each path, not the request; the whole-document get still answers.
        let mixed = try SubdocRequest.decode(
            opcode: 0xd0, extras: [], value: lookupSpec(0xc5, "n") + lookupSpec(0x00, ""))
        #expect(
            mixed.execute(on: bytes("raw"))
                == .reply(status: 0xcc, body: u16(0xc6) + u32(0) + u16(0) + u32(3) + bytes("raw")))
    }

    /// MULTI_MUTATION applies every spec or none: results only for specs with values (COUNTER), and on a
    /// failure the index and status of the first failing spec.
    @Test func multiMutation() throws {
        let value =
            mutationSpec(0xc8, "name", #""couch""#) + mutationSpec(0xcf, "n", "5") + mutationSpec(0xcb, "tags", #""b""#)
            + mutationSpec(0xc9, "nope2", "", flags: 0) + mutationSpec(0xc7, "new", "true")
        let failing = try SubdocRequest.decode(opcode: 0xd1, extras: [], value: value)
        #expect(failing.execute(on: document) == .reply(status: 0xcc, body: [3] + u16(0xc0)))
        let fine = try SubdocRequest.decode(
            opcode: 0xd1, extras: [],
            value: mutationSpec(0xc8, "name", #""couch""#) + mutationSpec(0xcf, "n", "5")
                + mutationSpec(0xcb, "tags", #""b""#))
        #expect(
            fine.execute(on: document)
                == .store(
                    document: bytes(#"{"name":"couch","tags":["a","b"],"n":6}"#), isJSON: true,
                    body: [1] + u16(0) + u32(1) + bytes("6")))
        #expect(fine.execute(on: nil) == .reply(status: 0x01, body: []))
    }

    /// Document flags: MKDOC creates a missing document (from `{}`), ADD refuses an existing one, and a
    /// whole-document SET or DELETE spec replaces or removes the body.
    @Test func documentFlags() throws {
        let upsert = mutationSpec(0xc8, "a.b", "1")
        let mkdoc = try SubdocRequest.decode(opcode: 0xd1, extras: [0x01], value: upsert)
        #expect(mkdoc.execute(on: nil) == .store(document: bytes(#"{"a":{"b":1}}"#), isJSON: true, body: []))
        let add = try SubdocRequest.decode(opcode: 0xd1, extras: [0x02], value: upsert)
        #expect(add.execute(on: document) == .reply(status: 0x02, body: []))
        #expect(add.execute(on: nil) == .store(document: bytes(#"{"a":{"b":1}}"#), isJSON: true, body: []))
        let set = try SubdocRequest.decode(
            opcode: 0xd1, extras: [], value: mutationSpec(0x01, "", #"{"x":1}"#) + mutationSpec(0xcf, "x", "1"))
        #expect(
            set.execute(on: document)
                == .store(document: bytes(#"{"x":2}"#), isJSON: true, body: [1] + u16(0) + u32(1) + bytes("2")))
        let delete = try SubdocRequest.decode(opcode: 0xd1, extras: [], value: mutationSpec(0x04, "", ""))
        #expect(delete.execute(on: document) == .delete)
        #expect(delete.execute(on: nil) == .reply(status: 0x01, body: []))
    }

    /// A single-path request answers the path's own status with no body, or the value (GET, COUNTER).
    @Test func singlePathOutcomes() throws {
        let get = try SubdocRequest.decode(opcode: 0xc5, extras: u16(4) + [0], value: bytes("name"))
        #expect(get.execute(on: document) == .reply(status: 0, body: bytes(#""settee""#)))
        let missing = try SubdocRequest.decode(opcode: 0xc5, extras: u16(1) + [0], value: bytes("x"))
        #expect(missing.execute(on: document) == .reply(status: 0xc0, body: []))
        #expect(missing.execute(on: bytes("not json")) == .reply(status: 0xc6, body: []))
        let counter = try SubdocRequest.decode(opcode: 0xcf, extras: u16(1) + [0], value: bytes("n-3"))
        #expect(
            counter.execute(on: document)
                == .store(document: bytes(#"{"name":"settee","tags":["a"],"n":-2}"#), isJSON: true, body: bytes("-2")))
        let bad = try SubdocRequest.decode(opcode: 0xc7, extras: u16(4) + [0], value: bytes("name1"))
        #expect(bad.execute(on: document) == .reply(status: 0xc9, body: []))
    }
}
