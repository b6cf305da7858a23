import SetteeCore

/// What virtual extended attributes show about a document and its vBucket: the item's metadata, read
/// together with its value, and the vBucket's clock. The shell fills it in; lookups stay pure.
public struct SubdocItemMetadata: Sendable, Equatable {
    public var cas: UInt64
    public var vbucketUUID: UInt64
    public var seqno: UInt64
    public var revSeqno: UInt64
    /// Absolute Unix seconds, 0 = never.
    public var expiry: UInt32
    public var flags: UInt32
    public var valueBytes: Int
    public var isJSON: Bool
    public var deleted: Bool
    /// The vBucket's hybrid logical clock now, in nanoseconds since the Unix epoch.
    public var hlcNowNanoseconds: UInt64
    /// Whether that clock runs ahead of the wall clock (it follows the largest CAS it has seen).
    public var hlcIsLogical: Bool
    /// The document has stored XATTRs (its datatype has the XATTR bit).
    public var hasXattrs: Bool

    public init(
        cas: UInt64, vbucketUUID: UInt64, seqno: UInt64, revSeqno: UInt64, expiry: UInt32, flags: UInt32,
        valueBytes: Int, isJSON: Bool, deleted: Bool, hlcNowNanoseconds: UInt64, hlcIsLogical: Bool,
        hasXattrs: Bool = false
    ) {
        self.hasXattrs = hasXattrs
        self.cas = cas
        self.vbucketUUID = vbucketUUID
        self.seqno = seqno
        self.revSeqno = revSeqno
        self.expiry = expiry
        self.flags = flags
        self.valueBytes = valueBytes
        self.isJSON = isJSON
        self.deleted = deleted
        self.hlcNowNanoseconds = hlcNowNanoseconds
        self.hlcIsLogical = hlcIsLogical
    }
}

/// Extended attribute (XATTR) paths of sub-document lookups (kv_engine `docs/ExtendedAttributes.md` and
/// `docs/SubDocument.md`).
///
/// The first component of an XATTR path is the attribute's name: `$…` names a virtual attribute, computed
/// from the item's metadata (`$document`, `$vbucket`, `$XTOC`); `_…` a system and anything else a user
/// attribute, read from the document's stored `XattrBlob` (a missing one is PATH_ENOENT); `$XTOC` lists
/// the stored names.
enum SubdocXattr {
    /// Runs a lookup spec whose path has the XATTR flag.
    /// Without `systemRead` (SystemXattrRead) a system attribute is EACCESS and `$XTOC` lists user ones only.
    static func lookup(
        _ command: SubdocCommand, path bytes: [UInt8], meta: SubdocItemMetadata, stored: XattrBlob, body: [UInt8],
        systemRead: Bool = true
    ) throws(SubdocError) -> [UInt8] {
        let path = try SubdocPath.parse(bytes, xattr: true)
        guard case .key(let name)? = path.components.first else { throw .pathInvalid }
        try checkName(name)
        if isSystem(name) && !systemRead { throw .accessDenied }
        let value: [UInt8]
        if name.first == UInt8(ascii: "$") {
            let visible = systemRead ? stored : stored.userOnly
            guard let virtual = virtualAttribute(name, meta: meta, stored: visible, body: body) else {
                throw .xattrUnknownVirtualAttribute
            }
            value = virtual
        } else {
            guard let found = stored.value(of: name) else { throw .pathNotFound }
            value = found
        }
        // The rest of the path walks into the attribute's value as into a body.
        let rest = SubdocPath(components: Array(path.components.dropFirst()))
        let attribute = try SubdocDocument(validating: value)
        if rest.isEmpty && command != .getCount { return command == .get ? value : [] }
        return try attribute.lookup(command, path: rest)
    }

    /// Whether attribute `name` is a system one (`_…`): kept on tombstones, guarded by SystemXattrRead/Write.
    static func isSystem(_ name: [UInt8]) -> Bool { name.first == UInt8(ascii: "_") }

    /// Whether an XATTR path names a virtual attribute (which no mutation may change).
    static func isVirtual(_ path: [UInt8]) -> Bool { path.first == UInt8(ascii: "$") }

    /// An attribute name is 1 to `Limits.subdocMaxXattrKeyLength` bytes and does not start with a control
    /// character or punctuation other than `_` (system) and `$` (virtual), and is UTF-8 without control
    /// characters.
    static func checkName(_ name: [UInt8]) throws(SubdocError) {
        guard let first = name.first, name.count <= Limits.subdocMaxXattrKeyLength else { throw .pathInvalid }
        guard String(validating: name, as: UTF8.self) != nil, !name.contains(where: { $0 < 0x20 || $0 == 0x7f })
        else { throw .pathInvalid }
        let punctuation =
            (0x21...0x2f).contains(first) || (0x3a...0x40).contains(first)
            || (0x5b...0x60).contains(first) || (0x7b...0x7e).contains(first)
        let control = first < 0x20 || first == 0x7f
        if control || (punctuation && first != UInt8(ascii: "_") && first != UInt8(ascii: "$")) {
            throw .pathInvalid
        }
    }

    /// The JSON of a virtual attribute, nil for a name the server does not have.
    ///
    /// `$document`: CAS, vbucket_uuid and seqno as "0x" + 16 hex digits, revid and last_modified (seconds,
    /// from the CAS's clock) as decimal strings, exptime, value_bytes and flags as numbers, datatype as the
    /// names of its bits, deleted as a boolean, value_crc32c (CRC-32C of `body`) as "0x" + 8 hex digits. `$vbucket`: `{"HLC":{"now":"<seconds>","mode":"real"|"logical"}}`.
    static func virtualAttribute(
        _ name: [UInt8], meta: SubdocItemMetadata, stored: XattrBlob = XattrBlob(), body: [UInt8] = []
    ) -> [UInt8]? {
        switch String(decoding: name, as: UTF8.self) {
        case "$document":
            let names = (meta.isJSON ? [#""json""#] : []) + (meta.hasXattrs ? [#""xattr""#] : [])
            let datatype = names.isEmpty ? #"["raw"]"# : "[" + names.joined(separator: ",") + "]"
            let text =
                #"{"CAS":"\#(hex(meta.cas))","vbucket_uuid":"\#(hex(meta.vbucketUUID))","seqno":"\#(hex(meta.seqno))","#
                + #""revid":"\#(meta.revSeqno)","exptime":\#(meta.expiry),"value_bytes":\#(meta.valueBytes),"#
                + #""datatype":\#(datatype),"deleted":\#(meta.deleted),"flags":\#(meta.flags),"#
                + #""last_modified":"\#(meta.cas / 1_000_000_000)","value_crc32c":"\#(hex(CRC32C.checksum(body), digits: 8))"}"#
            return Array(text.utf8)
        case "$vbucket":
            let mode = meta.hlcIsLogical ? "logical" : "real"
            return Array(#"{"HLC":{"now":"\#(meta.hlcNowNanoseconds / 1_000_000_000)","mode":"\#(mode)"}}"#.utf8)
        case "$XTOC":
            // Names pass `checkName` when stored; quote them as JSON strings (escaping `"` and `\`).
            var out: [UInt8] = [Ascii.openBracket]
            for (k, pair) in stored.pairs.enumerated() {
                if k > 0 { out.append(Ascii.comma) }
                out.append(Ascii.quote)
                for byte in pair.key {
                    if byte == Ascii.quote || byte == Ascii.backslash { out.append(Ascii.backslash) }
                    out.append(byte)
                }
                out.append(Ascii.quote)
            }
            out.append(Ascii.closeBracket)
            return out
        default:
            return nil
        }
    }

    private static func hex<T: BinaryInteger>(_ value: T, digits width: Int = 16) -> String {
        let digits = String(value, radix: 16)
        return "0x" + String(repeating: "0", count: max(0, width - digits.count)) + digits
    }
}
