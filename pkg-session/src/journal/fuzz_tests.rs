//! Fuzz target (proptest, stable Rust) for the journal decoder: no stored bytes make it
//! panic, and every event it is given back decodes to itself. `scripts/fuzz` runs it longer.

use proptest::prelude::*;
use treadle_event::{Event, EventKind, Header, InputId, Message, SessionId, Usage};

use super::codec::{FORMAT_JSON, decode, encode};

fn text() -> impl Strategy<Value = String> {
    proptest::collection::vec(any::<char>(), 0..40).prop_map(String::from_iter)
}

fn event() -> impl Strategy<Value = Event> {
    let kind = prop_oneof![
        text().prop_map(|reason| EventKind::SessionStopped { reason }),
        text().prop_map(|text| EventKind::TurnStarted {
            input: InputId::new(),
            message: Message::user(text),
        }),
        (text(), 0u32..100, 0u64..10_000).prop_map(|(text, steps, tokens)| {
            EventKind::TurnDone {
                text,
                steps,
                usage: Usage {
                    prompt_tokens: tokens,
                    completion_tokens: tokens / 2,
                    cached_tokens: 0,
                },
            }
        }),
    ];
    kind.prop_map(|kind| Event::new(Header::session(SessionId::new()), kind))
}

proptest! {
    #[test]
    fn fuzz_decoding_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode(&bytes);
        let mut json = vec![FORMAT_JSON];
        json.extend_from_slice(&bytes);
        let _ = decode(&json);
    }

    #[test]
    fn fuzz_every_encoded_event_decodes_to_itself(event in event()) {
        let bytes = encode(&event).expect("encode");
        prop_assert_eq!(decode(&bytes).expect("decode"), event);
    }

    #[test]
    fn fuzz_a_cut_or_flipped_value_is_an_error_or_an_event_never_a_panic(
        event in event(),
        cut in any::<prop::sample::Index>(),
        flip in any::<prop::sample::Index>(),
    ) {
        let mut bytes = encode(&event).expect("encode");
        let at = flip.index(bytes.len());
        bytes[at] ^= 0x5a;
        let _ = decode(&bytes);
        bytes.truncate(cut.index(bytes.len()));
        let _ = decode(&bytes);
    }
}
