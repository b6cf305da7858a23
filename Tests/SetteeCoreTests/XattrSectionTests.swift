import SetteeCore
import Testing

/// The XATTR section's byte layout as storage reads it (ADR 0029).
@Suite struct XattrSectionTests {
    private func pair(_ k: String, _ v: String) -> [UInt8] {
        let n = UInt32(k.utf8.count + v.utf8.count + 2)
        return [UInt8(n >> 24), UInt8((n >> 16) & 0xff), UInt8((n >> 8) & 0xff), UInt8(n & 0xff)] + Array(k.utf8)
            + [0] + Array(v.utf8) + [0]
    }
    private func section(_ pairs: [UInt8]...) -> [UInt8] {
        let all = pairs.flatMap { $0 }
        let n = UInt32(all.count)
        return [UInt8(n >> 24), UInt8((n >> 16) & 0xff), UInt8((n >> 8) & 0xff), UInt8(n & 0xff)] + all
    }

    /// The body starts after the declared section; a section longer than the value reads as none; the system
    /// attributes (`_…`) are kept in order, user ones dropped, and none at all gives an empty section.
    @Test func bodyAndSystemAttributes() {
        let value = section(pair("_sync", "1"), pair("user", "2"), pair("_txn", "[3]")) + Array("{}".utf8)
        #expect(XattrSection.length(of: value) == value.count - 2)
        #expect(XattrSection.body(of: value, hasXattrs: true) == Array("{}".utf8))
        #expect(XattrSection.body(of: value, hasXattrs: false) == value)
        #expect(XattrSection.systemOnly(value) == section(pair("_sync", "1"), pair("_txn", "[3]")))
        #expect(XattrSection.systemOnly(section(pair("user", "2")) + [1]).isEmpty)
        #expect(XattrSection.length(of: [0, 0, 0, 9, 1]) == nil)
        #expect(XattrSection.length(of: [0, 0]) == nil)
        // Hostile lengths inside the section never read past it.
        #expect(XattrSection.systemOnly([0, 0, 0, 6, 0xff, 0xff, 0xff, 0xff, 95, 0]).isEmpty)
    }

    /// A section written by a user without SystemXattrWrite keeps the old value's system attributes in front of
    /// its own (user attributes of the old value go); with none to keep, or no readable section, nothing changes.
    @Test func keepingSystemAttributes() {
        let old = section(pair("_sync", "1"), pair("user", "2"), pair("_txn", "[3]")) + Array("{}".utf8)
        let new = section(pair("mine", "4")) + Array("[5]".utf8)
        #expect(
            XattrSection.keepingSystem(of: old, in: new)
                == section(pair("_sync", "1"), pair("_txn", "[3]"), pair("mine", "4")) + Array("[5]".utf8))
        let emptied = section() + Array("7".utf8)
        #expect(
            XattrSection.keepingSystem(of: old, in: emptied) == section(pair("_sync", "1"), pair("_txn", "[3]")) + [55])
        #expect(XattrSection.keepingSystem(of: section(pair("user", "2")) + [1], in: new) == new)
        #expect(XattrSection.keepingSystem(of: old, in: [0, 0, 0, 9]) == [0, 0, 0, 9])
    }

    /// Macro placeholders get the CAS in little-endian hex (kv_engine's form), the seqno in natural order; one
    /// that does not fit the value is left alone.
    @Test func macrosFillPlaceholders() {
        var value = Array(#"x"0x0000000000000000""#.utf8)
        MutationMacro.fill([MutationMacro(offset: 1, kind: .cas)], in: &value, cas: 0x0102_0304_0506_0708, seqno: 9)
        #expect(String(decoding: value, as: UTF8.self) == #"x"0x0807060504030201""#)
        MutationMacro.fill([MutationMacro(offset: 1, kind: .seqno)], in: &value, cas: 1, seqno: 0xabc)
        #expect(String(decoding: value, as: UTF8.self) == #"x"0x0000000000000abc""#)
        let before = value
        MutationMacro.fill([MutationMacro(offset: 5, kind: .seqno)], in: &value, cas: 1, seqno: 1)
        #expect(value == before)
    }
}
