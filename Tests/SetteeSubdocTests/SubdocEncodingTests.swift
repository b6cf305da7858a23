import SetteeCore
import SetteeSubdoc
import Testing

/// The client's side of the multi-path forms: what `encodedExtras` / `encodedValue` write is what the KV port's
/// decoder reads, and lookup answers are parsed without trusting their lengths.
@Suite struct SubdocEncodingTests {
    @Test func multiMutationRoundTripsThroughTheDecoder() throws {
        // Proves: a MULTI_MUTATION built by a client (XATTR upsert with macros, whole-body SET, doc flags, expiry)
        // decodes on the server side into the same request.
        let request = SubdocRequest.multiMutation(
            [
                SubdocSpec(
                    operation: .command(.dictUpsert), flags: [.xattrPath, .mkdirP], path: Array("_sync".utf8),
                    value: Array(#"{"rev":"1-a"}"#.utf8)),
                SubdocSpec(
                    operation: .command(.dictUpsert), flags: [.xattrPath, .expandMacros], path: Array("_sync.cas".utf8),
                    value: Array(#""${Mutation.CAS}""#.utf8)),
                SubdocSpec(operation: .wholeDocumentSet, path: [], value: Array(#"{"a":1}"#.utf8)),
            ], docFlags: .accessDeleted, expiry: 60)
        #expect(request.encodedExtras == [0, 0, 0, 60, 0x04])
        let decoded = try SubdocRequest.decode(
            opcode: request.multiOpcode, extras: request.encodedExtras, value: request.encodedValue)
        #expect(decoded == request)
    }

    @Test func multiLookupRoundTripsAndAnswersParse() throws {
        // Proves: a lookup without flags has no extras and decodes back; a reply body parses into per-spec
        // results, and a truncated or overlong entry is refused instead of read past the end.
        let request = SubdocRequest.multiLookup([
            SubdocSpec(operation: .command(.get), flags: .xattrPath, path: Array("_sync".utf8)),
            SubdocSpec(operation: .wholeDocumentGet, path: []),
        ])
        #expect(request.encodedExtras.isEmpty)
        #expect(try SubdocRequest.decode(opcode: 0xd0, extras: [], value: request.encodedValue) == request)
        let reply: [UInt8] = [0x00, 0xc0, 0, 0, 0, 0] + [0, 0, 0, 0, 0, 2] + Array("{}".utf8)
        #expect(
            SubdocRequest.lookupResults(reply) == [
                .init(status: 0xc0, value: []), .init(status: 0, value: Array("{}".utf8)),
            ])
        #expect(SubdocRequest.lookupResults([0, 0, 0, 0, 0, 9, 1]) == nil)
        #expect(SubdocRequest.lookupResults([0, 0, 0xff, 0xff, 0xff, 0xff]) == nil)
        #expect(SubdocRequest.lookupResults([0, 0]) == nil)
        let failure = SubdocRequest.mutationFailure([2, 0x00, 0xc0])
        #expect(failure?.index == 2 && failure?.status == 0xc0)
        #expect(SubdocRequest.mutationFailure([2]) == nil)
    }
}
