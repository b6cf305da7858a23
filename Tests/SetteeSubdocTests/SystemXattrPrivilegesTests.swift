import Testing

@testable import SetteeSubdoc

private let body = bytes(#"{"a":1}"#)
private let meta = SubdocItemMetadata(
    cas: 1, vbucketUUID: 2, seqno: 3, revSeqno: 4, expiry: 0, flags: 0, valueBytes: 7, isJSON: true, deleted: false,
    hlcNowNanoseconds: 0, hlcIsLogical: false, hasXattrs: true)

/// SystemXattrRead / SystemXattrWrite as kv_engine applies them (ADR 0029): a mutation reaching a system XATTR
/// (`_…`) without write is EACCESS (0x24) for the request, before the document is read; a lookup of one without
/// read is EACCESS for that path only; `$XTOC` then lists user attributes only; `$document` and user attributes
/// need neither.
struct SystemXattrPrivilegesTests {
    @Test func mutationsOfSystemXattrsNeedWrite() throws {
        let system = try SubdocRequest.decode(
            opcode: 0xd1, extras: [],
            value: mutationSpec(0xc8, "user", "1", flags: 0x04) + mutationSpec(0xc8, "_sync.rev", "1", flags: 0x05))
        #expect(system.systemXattrRefusal([]) == 0x24)
        #expect(system.systemXattrRefusal(.read) == 0x24)
        #expect(system.systemXattrRefusal(.write) == nil)
        let user = try SubdocRequest.decode(
            opcode: 0xd1, extras: [],
            value: mutationSpec(0xc8, "user", "1", flags: 0x04) + mutationSpec(0xc8, "_x", "1"))  // a body path
        #expect(user.systemXattrRefusal([]) == nil)
        let single = try SubdocRequest.decode(opcode: 0xc9, extras: u16(5) + [0x04], value: bytes("_sync"))
        #expect(single.systemXattrRefusal([]) == 0x24)
        // A lookup is never refused as a whole.
        let lookup = try SubdocRequest.decode(opcode: 0xd0, extras: [], value: lookupSpec(0xc5, "_sync", flags: 0x04))
        #expect(lookup.systemXattrRefusal([]) == nil)
    }

    @Test func lookupsOfSystemXattrsNeedRead() throws {
        let stored = try #require(XattrBlob.split(section(pair("_sync", "1"), pair("app", "2")))).xattrs
        let request = try SubdocRequest.decode(
            opcode: 0xd0, extras: [],
            value: lookupSpec(0xc5, "_sync", flags: 0x04) + lookupSpec(0xc5, "app", flags: 0x04)
                + lookupSpec(0xc5, "$XTOC", flags: 0x04) + lookupSpec(0xc6, "$document.CAS", flags: 0x04)
                + lookupSpec(0xc5, "a"))
        let denied = request.execute(on: body, metadata: meta, xattrs: stored, privileges: [])
        let expected: [UInt8] =
            u16(0x24) + u32(0) + u16(0) + u32(1) + bytes("2") + u16(0) + u32(7) + bytes(#"["app"]"#)
            + u16(0) + u32(0) + u16(0) + u32(1) + bytes("1")
        #expect(denied == .reply(status: 0xcc, body: expected))
        let allowed = request.execute(on: body, metadata: meta, xattrs: stored, privileges: .read)
        let full: [UInt8] =
            u16(0) + u32(1) + bytes("1") + u16(0) + u32(1) + bytes("2") + u16(0) + u32(15)
            + bytes(#"["_sync","app"]"#) + u16(0) + u32(0) + u16(0) + u32(1) + bytes("1")
        #expect(allowed == .reply(status: 0, body: full))
        let single = try SubdocRequest.decode(opcode: 0xc5, extras: u16(9) + [0x04], value: bytes("_sync.rev"))
        #expect(
            single.execute(on: body, metadata: meta, xattrs: stored, privileges: []) == .reply(status: 0x24, body: []))
    }
}
