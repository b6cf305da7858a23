import SetteeCore

extension VBucketTable {
    /// Fills the macro placeholders of the value the key at `slot` was just given with its CAS and seqno, in place
    /// (the item stays the same size, so nothing is re-accounted). A key that was new has no index in `slot` yet.
    mutating func fillMacros(at slot: Slot, _ macros: [MutationMacro], cas: CAS, seqno: SeqNo) {
        guard let i = slot.index ?? items.index(forKey: slot.key), var value = items[at: i].value else { return }
        MutationMacro.fill(macros, in: &value, cas: cas.rawValue, seqno: seqno.rawValue)
        items[at: i].value = value
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
