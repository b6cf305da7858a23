import SetteeCore

extension VBucketTable {
    /// Fills the macro placeholders of the value `key` was just given with its CAS and seqno, in place (the
    /// item stays the same size, so nothing is re-accounted).
    mutating func fillMacros(_ key: [UInt8], _ macros: [MutationMacro], cas: CAS, seqno: SeqNo) {
        let k = DocKey(key)
        guard var value = items[k]?.value else { return }
        items[k]?.value = nil  // keep the buffer uniquely referenced: filled in place, not copied
        MutationMacro.fill(macros, in: &value, cas: cas.rawValue, seqno: seqno.rawValue)
        items[k]?.value = value
    }
}

extension Document {
    /// The document's body: the value without its XATTR section (ADR 0029). What GET answers and what views,
    /// the console and the gateway's embedded bucket read.
    public var body: [UInt8] { XattrSection.body(of: value, hasXattrs: meta.datatype.contains(.xattr)) }
}

extension ChangeRecord {
    /// The change's body: the value without its XATTR section (empty for a deletion).
    public var body: [UInt8] {
        meta.deleted ? [] : XattrSection.body(of: value, hasXattrs: meta.datatype.contains(.xattr))
    }
}
