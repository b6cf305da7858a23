/// Why a sub-document path operation failed, as the memcached binary protocol's per-path status codes
/// (kv_engine's `include/mcbp/protocol/status.h`, 0xc0–0xcb, 0xd0, 0xd1 and EACCESS 0x24). The raw value is the status a client sees.
public enum SubdocError: UInt16, Error, Sendable, Equatable, CaseIterable {
    /// PATH_ENOENT: a component of the path is not in the document.
    case pathNotFound = 0xc0
    /// PATH_MISMATCH: the path treats a non-object as an object or a non-array as an array, or (counter,
    /// count, array ops) the value at the path has the wrong type.
    case pathMismatch = 0xc1
    /// PATH_EINVAL: the path does not parse, or does not fit the command (e.g. DICT_ADD ending in an index).
    case pathInvalid = 0xc2
    /// PATH_E2BIG: longer than `Limits.subdocMaxPathLength` bytes or more than `Limits.subdocMaxPathComponents`.
    case pathTooBig = 0xc3
    /// DOC_E2DEEP: the document nests deeper than `Limits.subdocMaxDocumentDepth`.
    case documentTooDeep = 0xc4
    /// VALUE_CANTINSERT: the value is not JSON (or not what the command takes), or a counter would overflow.
    case valueCannotInsert = 0xc5
    /// DOC_NOTJSON: the stored document is not JSON.
    case documentNotJSON = 0xc6
    /// NUM_ERANGE: the existing number does not fit a signed 64-bit integer.
    case numberOutOfRange = 0xc7
    /// DELTA_EINVAL: a counter delta that is zero, not an integer, or outside signed 64 bits.
    case deltaInvalid = 0xc8
    /// PATH_EEXISTS: DICT_ADD of a member that exists, ARRAY_ADD_UNIQUE of a value already there.
    case pathExists = 0xc9
    /// VALUE_ETOODEEP: inserting the value would nest the document deeper than the limit.
    case valueTooDeep = 0xca
    /// INVALID_COMBO: a multi-path request with a command it cannot carry, or too many or no specs.
    case invalidCombination = 0xcb
    /// XATTR_UNKNOWN_MACRO: an EXPAND_MACROS value with a `"${…}"` the server does not know.
    case xattrUnknownMacro = 0xd0
    /// XATTR_UNKNOWN_VATTR: an XATTR path naming a virtual attribute (`$…`) the server does not have.
    case xattrUnknownVirtualAttribute = 0xd1
    /// EACCESS: a lookup of a system attribute (`_…`) without the SystemXattrRead privilege (kv_engine answers
    /// it per path).
    case accessDenied = 0x24
}
