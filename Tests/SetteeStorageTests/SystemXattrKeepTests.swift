import SetteeCore
import SetteeTestSupport
import Testing

@testable import SetteeStorage

/// A SET carrying its own XATTR section from a user without SystemXattrWrite (ADR 0029 amendment): the engine keeps
/// the live document's system attributes, so such a user can neither write nor drop `_sync`.
@Suite(.onTestThreads) struct SystemXattrKeepTests {
    let dir = TemporaryDirectory("storage")
    let vb = VBucketID(5)

    /// Proves: with `keepSystemXattrs` the new value is the old system attributes, then the request's user
    /// attributes, then its body (the old user attributes go, as a section replacement means); without it (a
    /// privileged writer) the section is replaced whole; a document without XATTRs takes the value as sent.
    @Test func systemAttributesSurviveAnUnprivilegedSection() throws {
        let e = try openEngine(dir)
        defer { e.shutdown() }
        let old = xattrValue([("_sync", #"{"rev":"2-b"}"#), ("meta", "1")], body: #"{"a":1}"#)
        _ = try e.store(.set, vb, key("d"), value: old, flags: 0, expiry: 0, datatype: [.json, .xattr], cas: .zero)
        let sent = xattrValue([("mine", "2")], body: #"{"a":2}"#)
        _ = try e.store(
            .set, vb, key("d"), value: sent, flags: 0, expiry: 0, datatype: [.json, .xattr], cas: .zero,
            preserveXattrs: false, keepSystemXattrs: true)
        let kept = try e.get(vb, key("d"))
        #expect(kept.value == xattrValue([("_sync", #"{"rev":"2-b"}"#), ("mine", "2")], body: #"{"a":2}"#))
        #expect(kept.meta.datatype == [.json, .xattr] && kept.body == bytes(#"{"a":2}"#))

        _ = try e.store(
            .set, vb, key("d"), value: sent, flags: 0, expiry: 0, datatype: [.json, .xattr], cas: .zero,
            preserveXattrs: false)
        #expect(try e.get(vb, key("d")).value == sent)

        _ = try e.store(
            .set, vb, key("plain"), value: sent, flags: 0, expiry: 0, datatype: [.json, .xattr], cas: .zero,
            preserveXattrs: false, keepSystemXattrs: true)
        #expect(try e.get(vb, key("plain")).value == sent)
    }
}
