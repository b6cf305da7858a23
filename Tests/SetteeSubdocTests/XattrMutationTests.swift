import SetteeCore
import Testing

@testable import SetteeSubdoc

private let body = bytes(#"{"a":1}"#)
private let meta = SubdocItemMetadata(
    cas: 1, vbucketUUID: 2, seqno: 3, revSeqno: 4, expiry: 0, flags: 0, valueBytes: 7, isJSON: true, deleted: false,
    hlcNowNanoseconds: 0, hlcIsLogical: false)
private let xattr: UInt8 = 0x04
private let mkdirP: UInt8 = 0x01
private let expand: UInt8 = 0x10

/// Runs a single-path mutation (`opcode`, path flags `flags`) on `body` with `stored` attributes.
private func single(
    _ opcode: UInt8, _ path: String, _ value: String, flags: UInt8 = xattr, stored: XattrBlob = XattrBlob(),
    document: [UInt8]? = body, deleted: Bool = false, docFlags: UInt8? = nil
) throws -> SubdocOutcome {
    let extras = u16(path.utf8.count) + [flags] + (docFlags.map { [$0] } ?? [])
    let request = try SubdocRequest.decode(opcode: opcode, extras: extras, value: bytes(path) + bytes(value))
    return request.execute(on: document, metadata: meta, xattrs: stored, deleted: deleted)
}

private func blob(_ value: [UInt8]) throws -> XattrBlob { try #require(XattrBlob.split(value)).xattrs }

/// Stored XATTRs edited by sub-document mutations (ADR 0029): the attribute is edited like a body member, the
/// result is the section then the untouched body, with kv_engine's per-path statuses.
struct XattrMutationTests {
    /// DICT_UPSERT stores an attribute in front of the untouched body; a deeper path needs MKDIR_P (PATH_ENOENT
    /// without it); REPLACE of a missing attribute is PATH_ENOENT; COUNTER and ARRAY_PUSH_LAST work inside one;
    /// DELETE removes it, and with no attribute left there is no section.
    @Test func attributesAreEditedLikeMembers() throws {
        let upsert = try single(0xc8, "_sync", #"{"rev":"1-a"}"#)
        let expected = section(pair("_sync", #"{"rev":"1-a"}"#)) + body
        #expect(upsert == .write(SubdocWrite(value: expected, isJSON: true, hasXattrs: true), body: []))

        #expect(try single(0xc8, "_sync.rev", #""1""#) == .reply(status: 0xc0, body: []))
        let deep = try single(0xc8, "_sync.rev", #""1""#, flags: xattr | mkdirP)
        #expect(
            deep
                == .write(
                    SubdocWrite(value: section(pair("_sync", #"{"rev":"1"}"#)) + body, isJSON: true, hasXattrs: true),
                    body: []))
        #expect(try single(0xca, "user", "1") == .reply(status: 0xc0, body: []))

        let stored = try blob(section(pair("n", #"{"c":1,"l":[]}"#), pair("_s", "true")) + body)
        guard case .write(let counted, let result) = try single(0xcf, "n.c", "41", stored: stored) else {
            Issue.record("COUNTER on an attribute did not store")
            return
        }
        #expect(
            result == bytes("42") && counted.value == section(pair("n", #"{"c":42,"l":[]}"#), pair("_s", "true")) + body
        )
        guard case .write(let pushed, _) = try single(0xcb, "n.l", #""x""#, stored: stored) else {
            Issue.record("ARRAY_PUSH_LAST on an attribute did not store")
            return
        }
        #expect(try blob(pushed.value).value(of: bytes("n")) == bytes(#"{"c":1,"l":["x"]}"#))
        guard case .write(let removed, _) = try single(0xc9, "n", "", stored: stored) else {
            Issue.record("DELETE of an attribute did not store")
            return
        }
        #expect(removed.value == section(pair("_s", "true")) + body)
        let last = try blob(section(pair("only", "1")) + body)
        #expect(try single(0xc9, "only", "", stored: last) == .write(SubdocWrite(value: body, isJSON: true), body: []))
        #expect(try single(0xc8, "bad\"name", "1") == .reply(status: 0xc2, body: []))
    }

    /// EXPAND_MACROS: `${Mutation.CAS}` and `${Mutation.seqno}` become placeholders the engine fills (their
    /// offsets in the stored value come back), `${Mutation.value_crc32c}` is the new body's CRC-32C at once, an
    /// unknown macro is XATTR_UNKNOWN_MACRO (0xd0).
    @Test func macrosExpand() throws {
        let value = #"{"cas":"${Mutation.CAS}","seq":"${Mutation.seqno}","crc":"${Mutation.value_crc32c}"}"#
        guard case .write(let write, _) = try single(0xc8, "_sync", value, flags: xattr | expand) else {
            Issue.record("macro upsert did not store")
            return
        }
        let zeros = "0x" + String(repeating: "0", count: 16)
        let text = #"{"cas":"\#(zeros)","seq":"\#(zeros)","crc":"0x\#(String(CRC32C.checksum(body), radix: 16))"}"#
        #expect(write.value == section(pair("_sync", text)) + body)
        let start = 4 + 4 + 6  // total, pair length, "_sync" 0
        #expect(
            write.macros == [
                MutationMacro(offset: start + 7, kind: .cas), MutationMacro(offset: start + 34, kind: .seqno),
            ])
        var filled = write.value
        MutationMacro.fill(write.macros, in: &filled, cas: 0x10, seqno: 0x20)
        #expect(
            String(decoding: filled, as: UTF8.self).contains(#""cas":"0x1000000000000000","seq":"0x0000000000000020""#))

        #expect(
            try single(0xc8, "_sync", #""${Mutation.nope}""#, flags: xattr | expand) == .reply(status: 0xd0, body: []))
        // Without the flag a macro is stored as written.
        guard case .write(let plain, _) = try single(0xc8, "x", #""${Mutation.CAS}""#) else {
            Issue.record("plain upsert did not store")
            return
        }
        #expect(plain.macros.isEmpty && plain.value == section(pair("x", #""${Mutation.CAS}""#)) + body)
    }

    /// User and system attributes are limited apart (`Limits.subdocMaxUserXattrSize` and
    /// `subdocMaxSystemXattrSize`, as kv_engine): a mutation taking either past its limit is E2BIG (0x03), while
    /// a user and a system attribute each just under their limit fit together.
    @Test func sectionLimit() throws {
        func string(_ n: Int) -> String { "\"" + String(repeating: "x", count: n) + "\"" }
        #expect(try single(0xc8, "big", string(Limits.subdocMaxUserXattrSize)) == .reply(status: 0x03, body: []))
        #expect(try single(0xc8, "_big", string(Limits.subdocMaxSystemXattrSize)) == .reply(status: 0x03, body: []))
        // Pair overhead: length u32, the name and two zero bytes, and the value's quotes.
        let user = string(Limits.subdocMaxUserXattrSize - 4 - 3 - 2 - 2)
        guard case .write(let first, _) = try single(0xc8, "big", user) else {
            Issue.record("a user attribute at its limit was refused")
            return
        }
        let stored = try blob(first.value)
        #expect(stored.sizes == (system: 0, user: Limits.subdocMaxUserXattrSize))
        let system = string(Limits.subdocMaxSystemXattrSize - 4 - 4 - 2 - 2)
        guard case .write(let both, _) = try single(0xc8, "_big", system, stored: stored) else {
            Issue.record("a system attribute at its limit next to a full user one was refused")
            return
        }
        #expect(
            try blob(both.value).sizes
                == (system: Limits.subdocMaxSystemXattrSize, user: Limits.subdocMaxUserXattrSize))
        #expect(try single(0xc8, "more", "1", stored: try blob(both.value)) == .reply(status: 0x03, body: []))
    }

    /// XATTR specs before a whole-document DELETE: the tombstone keeps the system attributes (as edited), user
    /// attributes go; macros in them are placeholders for the deletion's CAS.
    @Test func deleteKeepsSystemAttributes() throws {
        let stored = try blob(section(pair("_sync", "1"), pair("user", "2")) + body)
        let request = try SubdocRequest.decode(
            opcode: 0xd1, extras: [],
            value: mutationSpec(0xc8, "_sync", #"{"c":"${Mutation.CAS}"}"#, flags: xattr | expand)
                + mutationSpec(0x04, "", ""))
        let zeros = "0x" + String(repeating: "0", count: 16)
        #expect(
            request.execute(on: body, metadata: meta, xattrs: stored)
                == .remove(
                    keeping: section(pair("_sync", #"{"c":"\#(zeros)"}"#)),
                    macros: [MutationMacro(offset: 4 + 4 + 6 + 5, kind: .cas)]))
        let plain = try SubdocRequest.decode(opcode: 0xd1, extras: [], value: mutationSpec(0x04, "", ""))
        #expect(
            plain.execute(on: body, metadata: meta, xattrs: stored)
                == .remove(keeping: section(pair("_sync", "1")), macros: []))
    }

    /// A tombstone read with ACCESS_DELETED: lookups answer SUBDOC_SUCCESS_DELETED (0xcd) or
    /// MULTI_PATH_FAILURE_DELETED (0xd3), body paths are PATH_ENOENT; an XATTR mutation keeps it deleted, a body
    /// mutation is PATH_ENOENT unless MKDOC recreates the document (keeping the XATTRs).
    @Test func tombstones() throws {
        let kept = try blob(section(pair("_sync", #"{"rev":"2-b"}"#)))
        var tombMeta = meta
        tombMeta.deleted = true
        let lookup = try SubdocRequest.decode(
            opcode: 0xd0, extras: [0x04],
            value: lookupSpec(0xc5, "_sync.rev", flags: xattr) + lookupSpec(0xc5, "a"))
        #expect(
            lookup.execute(on: [], metadata: tombMeta, xattrs: kept, deleted: true)
                == .reply(status: 0xd3, body: [0, 0] + u32(5) + bytes(#""2-b""#) + [0, 0xc0] + u32(0)))
        let one = try SubdocRequest.decode(opcode: 0xc5, extras: u16(5) + [xattr, 0x04], value: bytes("_sync"))
        #expect(
            one.execute(on: [], metadata: tombMeta, xattrs: kept, deleted: true)
                == .reply(status: 0xcd, body: bytes(#"{"rev":"2-b"}"#)))

        let edited = try single(0xc8, "_sync.rev", #""3-c""#, stored: kept, document: [], deleted: true, docFlags: 0x04)
        #expect(
            edited
                == .write(
                    SubdocWrite(
                        value: section(pair("_sync", #"{"rev":"3-c"}"#)), isJSON: false, hasXattrs: true, deleted: true),
                    body: []))
        #expect(
            try single(0xc8, "a", "1", flags: 0, stored: kept, document: [], deleted: true, docFlags: 0x04)
                == .reply(status: 0xc0, body: []))
        let revived = try single(0xc8, "a", "1", flags: 0, stored: kept, document: [], deleted: true, docFlags: 0x05)
        #expect(
            revived
                == .write(
                    SubdocWrite(
                        value: section(pair("_sync", #"{"rev":"2-b"}"#)) + bytes(#"{"a":1}"#), isJSON: true,
                        hasXattrs: true), body: []))
    }

    /// A document created by XATTR specs alone (MKDOC) gets the body `{}`.
    @Test func createdByXattrsAlone() throws {
        let made = try single(0xc8, "_sync", "1", document: nil, docFlags: 0x01)
        #expect(
            made
                == .write(
                    SubdocWrite(value: section(pair("_sync", "1")) + bytes("{}"), isJSON: true, hasXattrs: true),
                    body: []))
    }
}
