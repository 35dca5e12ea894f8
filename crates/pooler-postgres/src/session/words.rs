//! The words the scan judges by (docs/design.md, "Recycling on return"): which statements
//! leave nothing by their kind, which functions are known to leave nothing, and which words
//! before a `(` make it no call. Anything not listed is taken to leave state: the lists only
//! ever make the scan say *clean*, so a word missing from them costs a reset, never a leak.

/// How a statement's first word judges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum First {
    /// A kind of statement that leaves no session state by itself (its words are still
    /// looked at: `SET`, `CREATE TEMP`, a call, …).
    Known,
    /// A statement the scan cannot see into (`CALL`, `DO`, SQL `EXECUTE`) or does not know.
    Unknown,
    /// A statement that undoes state of a kind (`UNLISTEN`: [`Dirt::LISTEN`]): nothing the
    /// user left, but maybe part of what the manager's `after_connect` hook set up, which
    /// the reset of that kind brings back (it runs the hook again). Of a kind the scan
    /// cannot tell (`CLOSE`, `FETCH`, `CREATE`, `ALTER`, `DROP`, …): [`Dirt::SET_UP`].
    ///
    /// [`Dirt::LISTEN`]: super::Dirt::LISTEN
    /// [`Dirt::SET_UP`]: super::Dirt::SET_UP
    Undoes(super::Bits),
}

/// Judges a statement by its first word (lower case).
pub(super) fn first(word: &[u8]) -> First {
    match word {
        b"select" | b"insert" | b"update" | b"delete" | b"with" | b"values" | b"table"
        | b"begin" | b"start" | b"commit" | b"end" | b"rollback" | b"abort" | b"savepoint"
        | b"release" | b"show" | b"explain" | b"copy" | b"truncate" | b"analyze" | b"analyse"
        | b"vacuum" | b"reindex" | b"lock" | b"merge" | b"refresh" | b"notify" | b"checkpoint"
        | b"prepare" | b"deallocate" | b"discard" | b"declare" | b"set" | b"reset" | b"listen"
        | b"load" | b"import" => First::Known,
        b"unlisten" => First::Undoes(super::Dirt::LISTEN),
        // What may change an object of the hook's (a cursor `WITH HOLD`, a temporary
        // table, view or sequence) as well as one of the user's or the database's.
        // `CLUSTER t USING i` marks the index a later `CLUSTER t` uses. Statistics and the
        // physical order (`ANALYZE`, `VACUUM`, `REINDEX`) are not what a user sees.
        b"close" | b"fetch" | b"move" | b"create" | b"alter" | b"drop" | b"cluster"
        | b"comment" | b"grant" | b"revoke" | b"security" => First::Undoes(super::Dirt::SET_UP),
        _ => First::Unknown,
    }
}

/// Whether `word` before a `(` makes it no call: a keyword (`IN (`, `VALUES (`, `OVER (`), a
/// type with a modifier (`numeric(10, 2)`).
pub(super) fn not_a_call(word: &[u8]) -> bool {
    matches!(
        word,
        b"in"
            | b"values"
            | b"exists"
            | b"any"
            | b"all"
            | b"some"
            | b"array"
            | b"row"
            | b"cast"
            | b"as"
            | b"on"
            | b"using"
            | b"key"
            | b"unique"
            | b"check"
            | b"references"
            | b"over"
            | b"filter"
            | b"within"
            | b"group"
            | b"by"
            | b"and"
            | b"or"
            | b"not"
            | b"select"
            | b"where"
            | b"returning"
            | b"set"
            | b"conflict"
            | b"default"
            | b"from"
            | b"join"
            | b"when"
            | b"then"
            | b"else"
            | b"case"
            | b"between"
            | b"like"
            | b"ilike"
            | b"is"
            | b"distinct"
            | b"union"
            | b"intersect"
            | b"except"
            | b"limit"
            | b"offset"
            | b"having"
            | b"order"
            | b"window"
            | b"with"
            | b"lateral"
            | b"into"
            | b"table"
            | b"partition"
            | b"include"
            | b"extract"
            | b"overlay"
            | b"position"
            | b"substring"
            | b"trim"
            | b"grouping"
            | b"rollup"
            | b"cube"
            | b"sets"
            | b"numeric"
            | b"decimal"
            | b"varchar"
            | b"char"
            | b"character"
            | b"varying"
            | b"timestamp"
            | b"timestamptz"
            | b"time"
            | b"timetz"
            | b"interval"
            | b"bit"
            | b"float"
            | b"only"
            | b"exclude"
            | b"for"
            | b"of"
            | b"to"
            | b"if"
            | b"returns"
            | b"constraint"
            | b"generated"
            | b"identity"
            | b"stored"
            | b"inherits"
            | b"options"
            | b"collate"
            | b"do"
            | b"update"
            | b"delete"
            | b"insert"
            | b"primary"
            | b"foreign"
            | b"materialized"
            | b"recursive"
            | b"nulls"
            | b"escape"
            | b"similar"
            | b"tablesample"
            | b"ordinality"
    )
}

/// Whether `word` names the object whose name comes next, so that a `(` after that name
/// opens a column list or parameters, not a call (`INSERT INTO t (a)`, `CREATE TABLE t (…)`,
/// `REFERENCES t (id)`, `WITH q (a) AS`, `AS t (x)`). `ON` and `USING` only in a `CREATE`
/// (an index's table and method): elsewhere a call may follow them.
pub(super) fn names_object(word: &[u8], in_create: bool) -> bool {
    match word {
        b"into" | b"table" | b"references" | b"view" | b"index" | b"function" | b"procedure"
        | b"aggregate" | b"type" | b"domain" | b"sequence" | b"trigger" | b"exists" | b"with"
        | b"recursive" | b"as" | b"constraint" => true,
        b"on" | b"using" => in_create,
        _ => false,
    }
}

/// Whether the built-in function `word` leaves no session state. Not listed, and so taken
/// as leaving state: `set_config`, the session advisory locks and their unlocks (which may
/// undo a lock the manager's `after_connect` hook took), `setseed`, any function of the
/// application's own.
pub(super) fn neutral_call(word: &[u8]) -> bool {
    matches!(
        word,
        // Aggregates and window functions.
        b"count" | b"sum" | b"avg" | b"min" | b"max" | b"array_agg" | b"string_agg"
            | b"json_agg" | b"jsonb_agg" | b"json_object_agg" | b"jsonb_object_agg"
            | b"bool_and" | b"bool_or" | b"every" | b"bit_and" | b"bit_or" | b"stddev"
            | b"variance" | b"percentile_cont" | b"percentile_disc" | b"mode"
            | b"row_number" | b"rank" | b"dense_rank" | b"percent_rank" | b"cume_dist"
            | b"ntile" | b"lag" | b"lead" | b"first_value" | b"last_value" | b"nth_value"
            // Conditionals, strings, numbers.
            | b"coalesce" | b"nullif" | b"greatest" | b"least" | b"lower" | b"upper"
            | b"initcap" | b"length" | b"char_length" | b"octet_length" | b"substr"
            | b"btrim" | b"ltrim" | b"rtrim" | b"lpad" | b"rpad" | b"replace"
            | b"translate" | b"concat" | b"concat_ws" | b"format" | b"left" | b"right"
            | b"reverse" | b"repeat" | b"strpos" | b"split_part" | b"starts_with"
            | b"regexp_replace" | b"regexp_match" | b"regexp_matches"
            | b"regexp_split_to_array" | b"regexp_split_to_table" | b"md5" | b"sha256"
            | b"encode" | b"decode" | b"to_hex" | b"ascii" | b"chr" | b"quote_ident"
            | b"quote_literal" | b"quote_nullable" | b"abs" | b"round" | b"floor"
            | b"ceil" | b"ceiling" | b"trunc" | b"mod" | b"power" | b"sqrt" | b"exp"
            | b"ln" | b"log" | b"sign" | b"div" | b"pi" | b"random" | b"num_nulls"
            | b"num_nonnulls" | b"gen_random_uuid" | b"uuid_generate_v4"
            // Time.
            | b"now" | b"clock_timestamp" | b"statement_timestamp"
            | b"transaction_timestamp" | b"timeofday" | b"date_trunc" | b"date_part"
            | b"date_bin" | b"age" | b"make_date" | b"make_time" | b"make_timestamp"
            | b"make_timestamptz" | b"make_interval" | b"to_char" | b"to_date"
            | b"to_number" | b"to_timestamp" | b"justify_days" | b"justify_hours"
            | b"isfinite"
            // Arrays and sets.
            | b"unnest" | b"generate_series" | b"generate_subscripts" | b"array_length"
            | b"array_upper" | b"array_lower" | b"array_append" | b"array_prepend"
            | b"array_cat" | b"array_position" | b"array_positions" | b"array_remove"
            | b"array_replace" | b"array_to_string" | b"string_to_array" | b"cardinality"
            | b"array_ndims" | b"array_dims"
            // JSON.
            | b"to_json" | b"to_jsonb" | b"json_build_object" | b"jsonb_build_object"
            | b"json_build_array" | b"jsonb_build_array" | b"json_object" | b"jsonb_object"
            | b"jsonb_set" | b"jsonb_insert" | b"jsonb_strip_nulls" | b"jsonb_pretty"
            | b"json_array_elements" | b"jsonb_array_elements" | b"json_array_elements_text"
            | b"jsonb_array_elements_text" | b"json_each" | b"jsonb_each"
            | b"json_each_text" | b"jsonb_each_text" | b"json_extract_path"
            | b"jsonb_extract_path" | b"json_extract_path_text" | b"jsonb_extract_path_text"
            | b"json_array_length" | b"jsonb_array_length" | b"json_typeof"
            | b"jsonb_typeof" | b"jsonb_path_query" | b"jsonb_path_exists"
            | b"row_to_json" | b"array_to_json"
            // The session and the server, read only; sequences (their per-session
            // `currval` is not tracked: docs/design.md); transaction-level locks.
            | b"current_setting" | b"pg_backend_pid" | b"version" | b"current_database"
            | b"current_schema" | b"current_schemas" | b"pg_typeof" | b"format_type"
            | b"has_table_privilege" | b"has_schema_privilege" | b"pg_relation_size"
            | b"pg_total_relation_size" | b"pg_size_pretty" | b"pg_my_temp_schema"
            | b"pg_listening_channels" | b"txid_current" | b"pg_current_xact_id"
            | b"nextval" | b"currval" | b"lastval" | b"setval" | b"pg_sleep" | b"pg_notify"
            | b"pg_advisory_xact_lock" | b"pg_advisory_xact_lock_shared"
            | b"pg_try_advisory_xact_lock" | b"pg_try_advisory_xact_lock_shared"
            // Casts written as calls.
            | b"int" | b"int2" | b"int4" | b"int8" | b"text" | b"bool" | b"date" | b"uuid"
            | b"jsonb" | b"json" | b"bytea" | b"float4" | b"float8" | b"bigint"
            | b"integer" | b"smallint" | b"real" | b"regclass"
    )
}

/// Keywords the scan acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Kw {
    #[default]
    Other,
    Set,
    Reset,
    Local,
    Transaction,
    Constraints,
    Prepare,
    Listen,
    Create,
    Temp,
    Into,
    Declare,
    Hold,
    Load,
    Discard,
    Deallocate,
    /// `TABLE`, `VIEW`, `SEQUENCE`: after it, a `CREATE` names its object.
    Object,
    PgTemp,
    SetConfig,
    Advisory,
    Explain,
    Select,
}

pub(super) fn keyword(word: &[u8]) -> Kw {
    // Most words are no keyword: a length and a first letter rule them out before any
    // comparison.
    if !(3..=27).contains(&word.len())
        || !matches!(
            word[0],
            b's' | b'r' | b'l' | b't' | b'c' | b'p' | b'i' | b'd' | b'h' | b'v' | b'e'
        )
    {
        return Kw::Other;
    }
    match word {
        b"set" => Kw::Set,
        b"select" => Kw::Select,
        b"explain" => Kw::Explain,
        b"reset" => Kw::Reset,
        b"local" => Kw::Local,
        b"transaction" => Kw::Transaction,
        b"constraints" => Kw::Constraints,
        b"prepare" => Kw::Prepare,
        b"listen" => Kw::Listen,
        b"create" => Kw::Create,
        b"temp" | b"temporary" => Kw::Temp,
        b"into" => Kw::Into,
        b"declare" => Kw::Declare,
        b"hold" => Kw::Hold,
        b"load" => Kw::Load,
        b"discard" => Kw::Discard,
        b"deallocate" => Kw::Deallocate,
        b"table" | b"view" | b"sequence" => Kw::Object,
        b"set_config" => Kw::SetConfig,
        b"pg_advisory_lock"
        | b"pg_advisory_lock_shared"
        | b"pg_try_advisory_lock"
        | b"pg_try_advisory_lock_shared" => Kw::Advisory,
        _ if temp_schema(word) => Kw::PgTemp,
        _ => Kw::Other,
    }
}

/// Whether `name` (lower case, or a quoted name as written) names the session's temporary
/// schema: `pg_temp`, or its own name `pg_temp_N` (which a session can write once it has
/// made a temporary object, and keeps after a reset drops them).
pub(super) fn temp_schema(name: &[u8]) -> bool {
    match name.strip_prefix(b"pg_temp") {
        Some([]) => true,
        Some([b'_', n @ ..]) => !n.is_empty() && n.iter().all(u8::is_ascii_digit),
        _ => false,
    }
}
