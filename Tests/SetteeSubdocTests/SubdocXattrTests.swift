import Testing

@testable import SetteeSubdoc

private let xattrFlag: UInt8 = 0x04

private let body = bytes(#"{"name":"settee"}"#)
private let meta = SubdocItemMetadata(
    cas: 0x1712_3456_789a_bcde, vbucketUUID: 0xabc, seqno: 42, revSeqno: 7, expiry: 1_900_000_000, flags: 0x0200_0006,
    valueBytes: 17, isJSON: true, deleted: false, hlcNowNanoseconds: 1_800_000_000_123_456_789, hlcIsLogical: false)

/// What one single-path SUBDOC_GET-style lookup (opcode `opcode`, XATTR flag) answers on `body`.
private func single(_ opcode: UInt8, _ path: String, on document: [UInt8] = body) throws -> SubdocOutcome {
    let request = try SubdocRequest.decode(
        opcode: opcode, extras: u16(path.utf8.count) + [xattrFlag], value: bytes(path))
    return request.execute(on: document, metadata: meta)
}

/// Virtual extended attributes (`$document`, `$vbucket`, `$XTOC`) in sub-document lookups, as kv_engine's
/// `docs/ExtendedAttributes.md` defines them: computed from the item's metadata, read-only.
struct SubdocXattrTests {
    /// Proves `$document` shows the item's metadata in kv_engine's shape (hex strings for CAS, vBucket uuid
    /// and seqno; decimal strings for revid and last_modified; numbers for exptime, value_bytes and flags;
    /// the body's CRC-32C, computed independently, as 8 hex digits).
    @Test func documentAttributeShowsTheItemMetadata() throws {
        let expected =
            #"{"CAS":"0x17123456789abcde","vbucket_uuid":"0x0000000000000abc","seqno":"0x000000000000002a","#
            + #""revid":"7","exptime":1900000000,"value_bytes":17,"datatype":["json"],"deleted":false,"#
            + #""flags":33554438,"last_modified":"1662448758","value_crc32c":"0x291c40bf"}"#
        #expect(try single(0xc5, "$document") == .reply(status: 0, body: bytes(expected)))
        #expect(try single(0xd2, "$document") == .reply(status: 0, body: bytes("11")))
    }

    /// Proves the CRC-32C is Castagnoli's: the standard check value of "123456789" is 0xe3069283.
    @Test func crc32cCheckValue() {
        #expect(CRC32C.checksum(bytes("123456789")) == 0xe306_9283)
        #expect(CRC32C.checksum([]) == 0)
    }

    /// Proves paths reach into virtual attributes like into a body: members, array positions, EXISTS.
    @Test(arguments: [
        ("$document.exptime", "1900000000"), ("$document.CAS", #""0x17123456789abcde""#),
        ("$document.value_bytes", "17"), ("$document.datatype[0]", #""json""#), ("$document.revid", #""7""#),
        ("$document.deleted", "false"), ("$document.flags", "33554438"),
        ("$vbucket.HLC.now", #""1800000000""#), ("$vbucket.HLC.mode", #""real""#), ("$XTOC", "[]"),
    ])
    func virtualAttributePaths(path: String, value: String) throws {
        #expect(try single(0xc5, path) == .reply(status: 0, body: bytes(value)))
        #expect(try single(0xc6, path) == .reply(status: 0, body: []))
    }

    /// Proves the per-path statuses: an unknown virtual attribute is XATTR_UNKNOWN_VATTR (0xd1), a missing
    /// member of a known one PATH_ENOENT, a user or system attribute (none is stored) PATH_ENOENT, a name
    /// longer than 16 bytes or starting with punctuation PATH_EINVAL.
    @Test(arguments: [
        ("$documents", SubdocError.xattrUnknownVirtualAttribute), ("$document.nope", .pathNotFound),
        ("userattr", .pathNotFound), ("_sync.rev", .pathNotFound), ("a234567890abcdefg", .pathInvalid),
        ("!bang", .pathInvalid), ("$document.CAS[0]", .pathMismatch),
    ])
    func badXattrPaths(path: String, error: SubdocError) throws {
        #expect(try single(0xc5, path) == .reply(status: error.rawValue, body: []))
    }

    /// Proves XATTR lookups read the metadata whatever the body is (a binary value still has `$document`)
    /// and that a missing document is KEY_ENOENT before any path is looked at.
    @Test func xattrLookupsOnBinaryAndMissingDocuments() throws {
        #expect(
            try single(0xc5, "$document.exptime", on: [0xff, 0x00]) == .reply(status: 0, body: bytes("1900000000")))
        let request = try SubdocRequest.decode(opcode: 0xc5, extras: u16(9) + [xattrFlag], value: bytes("$document"))
        #expect(request.execute(on: nil, metadata: nil) == .reply(status: 0x01, body: []))
    }

    /// Proves the SDK's `get(with_expiry=True)` shape works: a MULTI_LOOKUP of `$document.exptime` and
    /// `$document.flags` (XATTR) then the whole body (opcode 0x00) answers each in order, and a failing
    /// virtual path fails only its own spec (MULTI_PATH_FAILURE, the body still returned).
    @Test func multiLookupWithVirtualAttributesThenBody() throws {
        let specs =
            lookupSpec(0xc5, "$document.exptime", flags: xattrFlag)
            + lookupSpec(0xc5, "$document.flags", flags: xattrFlag)
            + lookupSpec(0x00, "")
        let request = try SubdocRequest.decode(opcode: 0xd0, extras: [], value: specs)
        let expected =
            u16(0) + u32(10) + bytes("1900000000") + u16(0) + u32(8) + bytes("33554438") + u16(0) + u32(body.count)
            + body
        #expect(request.execute(on: body, metadata: meta) == .reply(status: 0, body: expected))

        let failing = try SubdocRequest.decode(
            opcode: 0xd0, extras: [], value: lookupSpec(0xc5, "$bogus", flags: xattrFlag) + lookupSpec(0xc5, "name"))
        let partial = u16(0xd1) + u32(0) + u16(0) + u32(8) + bytes(#""settee""#)
        #expect(failing.execute(on: body, metadata: meta) == .reply(status: 0xcc, body: partial))
    }

    /// Proves `$vbucket` reports a logical clock when the vBucket's clock runs ahead of the wall clock.
    @Test func vbucketAttributeReportsALogicalClock() {
        var logical = meta
        logical.hlcIsLogical = true
        let value = SubdocXattr.virtualAttribute(bytes("$vbucket"), meta: logical)
        #expect(value == bytes(#"{"HLC":{"now":"1800000000","mode":"logical"}}"#))
    }
}
