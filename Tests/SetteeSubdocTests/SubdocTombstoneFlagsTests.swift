import Testing

@testable import SetteeSubdoc

private let accessDeleted: UInt8 = 0x04
private let add: UInt8 = 0x02
private let mkdoc: UInt8 = 0x01
private let createAsDeleted: UInt8 = 0x08
private let revive: UInt8 = 0x10

/// A MULTI_MUTATION of `specs` with document flags `docFlags`, run on `document` (nil: no item).
private func run(
    _ specs: [UInt8], docFlags: UInt8, document: [UInt8]?, stored: XattrBlob = XattrBlob(), deleted: Bool = false
) throws -> SubdocOutcome {
    let request = try SubdocRequest.decode(opcode: 0xd1, extras: [docFlags], value: specs)
    return request.execute(on: document, xattrs: stored, deleted: deleted)
}

private let upsertSync = mutationSpec(0xc8, "_sync", #"{"rev":"1-a"}"#, flags: 0x04)

/// The CREATE_AS_DELETED (0x08) and REVIVE_DOCUMENT (0x10) document flags as kv_engine defines them: a missing
/// document created as a tombstone holding only the XATTRs written, a tombstone brought back to life, and
/// SUBDOC_CAN_ONLY_REVIVE_DELETED_DOCUMENTS (0xd6) for a live one.
struct SubdocTombstoneFlagsTests {
    /// No item + ADD|ACCESS_DELETED|CREATE_AS_DELETED: a tombstone write holding only the section (no `{}` body);
    /// MKDOC works the same. A live document is KEY_EEXISTS with ADD, and stays live (edited) with MKDOC.
    @Test func createAsDeletedMakesATombstone() throws {
        let expected = SubdocWrite(
            value: section(pair("_sync", #"{"rev":"1-a"}"#)), isJSON: false, hasXattrs: true, deleted: true)
        for semantics in [add, mkdoc] {
            let outcome = try run(upsertSync, docFlags: semantics | accessDeleted | createAsDeleted, document: nil)
            #expect(outcome == .write(expected, body: []))
        }
        let live = bytes(#"{"a":1}"#)
        #expect(
            try run(upsertSync, docFlags: add | accessDeleted | createAsDeleted, document: live)
                == .reply(status: 0x02, body: []))
        guard
            case .write(let edited, _) = try run(
                upsertSync, docFlags: mkdoc | accessDeleted | createAsDeleted, document: live)
        else {
            Issue.record("MKDOC on a live document did not write")
            return
        }
        #expect(!edited.deleted && edited.value == section(pair("_sync", #"{"rev":"1-a"}"#)) + live)
        // An existing tombstone with ADD: its attributes are edited and it stays one.
        let kept = try #require(XattrBlob.split(section(pair("_old", "1")))).xattrs
        guard
            case .write(let tomb, _) = try run(
                upsertSync, docFlags: add | accessDeleted | createAsDeleted, document: [], stored: kept,
                deleted: true)
        else {
            Issue.record("create-as-deleted on a tombstone did not write")
            return
        }
        #expect(tomb.deleted && tomb.value == section(pair("_old", "1"), pair("_sync", #"{"rev":"1-a"}"#)))
    }

    /// REVIVE_DOCUMENT on a tombstone makes it live: with a body SET the new body follows the edited section;
    /// with XATTR specs alone the body stays empty (not JSON). On a live document it is 0xd6; with no item and
    /// no creation flag KEY_ENOENT.
    @Test func reviveBringsATombstoneBack() throws {
        let kept = try #require(XattrBlob.split(section(pair("_sync", #"{"rev":"1-a"}"#)))).xattrs
        let withBody = upsertSync + mutationSpec(0x01, "", #"{"b":2}"#)
        guard
            case .write(let revived, _) = try run(
                withBody, docFlags: accessDeleted | revive, document: [], stored: kept, deleted: true)
        else {
            Issue.record("revive did not write")
            return
        }
        #expect(!revived.deleted && revived.isJSON)
        #expect(revived.value == section(pair("_sync", #"{"rev":"1-a"}"#)) + bytes(#"{"b":2}"#))

        guard
            case .write(let bare, _) = try run(
                upsertSync, docFlags: accessDeleted | revive, document: [], stored: kept, deleted: true)
        else {
            Issue.record("revive with XATTRs only did not write")
            return
        }
        #expect(!bare.deleted && !bare.isJSON && bare.value == section(pair("_sync", #"{"rev":"1-a"}"#)))

        #expect(
            try run(upsertSync, docFlags: accessDeleted | revive, document: bytes("{}"))
                == .reply(status: 0xd6, body: []))
        #expect(try run(upsertSync, docFlags: accessDeleted | revive, document: nil) == .reply(status: 0x01, body: []))
        // A body path on a tombstone is editable when reviving (it starts from an empty object).
        guard
            case .write(let edited, _) = try run(
                mutationSpec(0xc8, "x", "1"), docFlags: accessDeleted | revive, document: [], deleted: true)
        else {
            Issue.record("revive with a body path did not write")
            return
        }
        #expect(!edited.deleted && edited.value == bytes(#"{"x":1}"#))
    }
}
