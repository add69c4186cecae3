//! The seeded probabilistic grammar behind the generated corpus (the rules are listed in the
//! module docs of [`super`]).

use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The two forms of an inflected word: `(singular, plural)` for nouns, `(third person
/// singular, plural)` for verbs.
pub type Forms = (&'static str, &'static str);

/// Nouns that can be subjects (they see, sing and speak).
pub const ANIMATE_NOUNS: &[Forms] = &[
    ("dog", "dogs"),
    ("cat", "cats"),
    ("child", "children"),
    ("teacher", "teachers"),
    ("bird", "birds"),
    ("farmer", "farmers"),
    ("mouse", "mice"),
    ("king", "kings"),
    ("sailor", "sailors"),
    ("owl", "owls"),
];

/// Nouns that appear only as objects and in prepositional phrases.
pub const THING_NOUNS: &[Forms] = &[
    ("book", "books"),
    ("stone", "stones"),
    ("box", "boxes"),
    ("apple", "apples"),
    ("key", "keys"),
    ("map", "maps"),
    ("table", "tables"),
    ("boat", "boats"),
    ("lamp", "lamps"),
    ("song", "songs"),
];

/// Adjectives, before a noun or after a copula.
pub const ADJECTIVES: &[&str] =
    &["old", "small", "red", "quiet", "happy", "green", "clever", "tired", "empty", "angry", "young", "brave"];

/// Determiners of singular nouns (`a` becomes `an` before a vowel).
pub const SINGULAR_DETERMINERS: &[&str] = &["the", "a", "this", "every", "each", "one"];

/// Determiners of plural nouns.
pub const PLURAL_DETERMINERS: &[&str] = &["the", "these", "those", "some", "many", "two", "three"];

/// Verbs without an object.
pub const INTRANSITIVE_VERBS: &[Forms] = &[
    ("sleeps", "sleep"),
    ("runs", "run"),
    ("sings", "sing"),
    ("waits", "wait"),
    ("laughs", "laugh"),
    ("swims", "swim"),
];

/// Verbs with an object; also the verbs of relative clauses.
pub const TRANSITIVE_VERBS: &[Forms] = &[
    ("sees", "see"),
    ("likes", "like"),
    ("finds", "find"),
    ("follows", "follow"),
    ("carries", "carry"),
    ("watches", "watch"),
    ("draws", "draw"),
];

/// Verbs of speech, followed by a quoted sentence.
pub const SAYING_VERBS: &[Forms] =
    &[("says", "say"), ("shouts", "shout"), ("writes", "write"), ("whispers", "whisper")];

/// Copulas, followed by an adjective.
pub const COPULAS: &[Forms] = &[("is", "are"), ("was", "were"), ("seems", "seem")];

/// Prepositions, followed by a noun phrase.
pub const PREPOSITIONS: &[&str] = &["near", "behind", "with", "under", "beside", "above"];

/// Adverbs, before an intransitive or transitive verb.
pub const ADVERBS: &[&str] = &["often", "never", "always", "rarely", "still"];

/// Grammatical number, shared by a subject and its verb.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Number {
    Singular,
    Plural,
}

impl Number {
    fn random(rng: &mut ChaCha8Rng) -> Self {
        if rng.random_bool(0.5) {
            Number::Plural
        } else {
            Number::Singular
        }
    }

    fn form(self, forms: &Forms) -> &'static str {
        match self {
            Number::Singular => forms.0,
            Number::Plural => forms.1,
        }
    }

    fn determiners(self) -> &'static [&'static str] {
        match self {
            Number::Singular => SINGULAR_DETERMINERS,
            Number::Plural => PLURAL_DETERMINERS,
        }
    }
}

/// At least `min_bytes` bytes of ASCII text from the grammar, reproducible from `seed`:
/// paragraphs of two to six sentences, one paragraph per line. The paragraphs come from one
/// RNG stream, so a shorter request is a prefix of a longer one with the same seed.
pub fn generate_text(seed: u64, min_bytes: usize) -> String {
    // ChaCha8 rather than `StdRng`: its output is specified and fixed across rand releases.
    let mut grammar = Grammar { rng: ChaCha8Rng::seed_from_u64(seed) };
    let mut text = String::with_capacity(min_bytes + 1024);
    while text.len() < min_bytes {
        text.push_str(&grammar.paragraph());
        text.push('\n');
    }
    text
}

struct Grammar {
    rng: ChaCha8Rng,
}

impl Grammar {
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        *items.choose(&mut self.rng).expect("the lexicon lists are not empty")
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }

    fn paragraph(&mut self) -> String {
        let sentences = self.rng.random_range(2..=6);
        (0..sentences).map(|_| self.sentence(0)).collect::<Vec<_>>().join(" ")
    }

    /// `Sentence -> Subject VerbPhrase ("." | "!")`, capitalised; a verb phrase that ends in
    /// a quotation ends the sentence itself.
    fn sentence(&mut self, depth: usize) -> String {
        let (subject, number) = self.subject();
        let verb_phrase = self.verb_phrase(number, depth);
        let mut sentence = format!("{subject} {verb_phrase}");
        if !sentence.ends_with('"') {
            sentence.push(if self.chance(0.15) { '!' } else { '.' });
        }
        capitalise(&sentence)
    }

    /// `NounPhrase(n) -> Determiner(n) [Adjective] Noun(n)`, with `a` -> `an` before a vowel.
    fn noun_phrase(&mut self, number: Number, nouns: &[Forms]) -> String {
        let determiner = self.pick(number.determiners());
        let adjective = if self.chance(0.4) { Some(self.pick(ADJECTIVES)) } else { None };
        let noun = number.form(&self.pick(nouns));
        let next = adjective.unwrap_or(noun);
        let determiner = if determiner == "a" && starts_with_vowel(next) { "an" } else { determiner };
        match adjective {
            Some(adjective) => format!("{determiner} {adjective} {noun}"),
            None => format!("{determiner} {noun}"),
        }
    }

    /// A noun phrase of random number, animate or not.
    fn any_noun_phrase(&mut self) -> String {
        let number = Number::random(&mut self.rng);
        let nouns = if self.chance(0.5) { ANIMATE_NOUNS } else { THING_NOUNS };
        self.noun_phrase(number, nouns)
    }

    /// `Subject(n) -> NounPhrase(n) [RelativeClause] [PrepositionalPhrase] [Parenthesis]`:
    /// the modifiers put up to a dozen words, and other nouns of either number, between the
    /// subject and its verb.
    fn subject(&mut self) -> (String, Number) {
        let number = Number::random(&mut self.rng);
        let mut subject = self.noun_phrase(number, ANIMATE_NOUNS);
        if self.chance(0.3) {
            // `RelativeClause -> "that" NounPhrase(m) TransitiveVerb(m)`
            let inner = Number::random(&mut self.rng);
            let noun_phrase = self.noun_phrase(inner, ANIMATE_NOUNS);
            let verb = inner.form(&self.pick(TRANSITIVE_VERBS));
            subject = format!("{subject} that {noun_phrase} {verb}");
        }
        if self.chance(0.3) {
            subject = format!("{subject} {}", self.prepositional_phrase());
        }
        if self.chance(0.2) {
            subject = format!("{subject} {}", self.parenthesis(0));
        }
        (subject, number)
    }

    /// `PrepositionalPhrase -> Preposition NounPhrase(any)`.
    fn prepositional_phrase(&mut self) -> String {
        let preposition = self.pick(PREPOSITIONS);
        format!("{preposition} {}", self.any_noun_phrase())
    }

    /// `Parenthesis -> "(" ("which" NounPhrase(m) [Parenthesis] TransitiveVerb(m) |
    /// PrepositionalPhrase) ")"`, nested at most two deep.
    fn parenthesis(&mut self, level: usize) -> String {
        if self.chance(0.6) {
            let inner = Number::random(&mut self.rng);
            let mut clause = format!("which {}", self.noun_phrase(inner, ANIMATE_NOUNS));
            if level == 0 && self.chance(0.3) {
                clause = format!("{clause} {}", self.parenthesis(level + 1));
            }
            format!("({clause} {})", inner.form(&self.pick(TRANSITIVE_VERBS)))
        } else {
            format!("({})", self.prepositional_phrase())
        }
    }

    /// `VerbPhrase(n) -> [Adverb] IntransitiveVerb(n) | [Adverb] TransitiveVerb(n)
    /// NounPhrase(any) | Copula(n) Adjective | SayingVerb(n) "," '"' Sentence '"'`; the
    /// quotation only at the top level, so quotes never nest.
    fn verb_phrase(&mut self, number: Number, depth: usize) -> String {
        let adverb = |g: &mut Self| if g.chance(0.25) { format!("{} ", g.pick(ADVERBS)) } else { String::new() };
        let roll = self.rng.random_range(0..100);
        if roll < 30 || (roll >= 85 && depth > 0) {
            let adverb = adverb(self);
            format!("{adverb}{}", number.form(&self.pick(INTRANSITIVE_VERBS)))
        } else if roll < 65 {
            let adverb = adverb(self);
            let verb = number.form(&self.pick(TRANSITIVE_VERBS));
            format!("{adverb}{verb} {}", self.any_noun_phrase())
        } else if roll < 85 {
            let copula = number.form(&self.pick(COPULAS));
            format!("{copula} {}", self.pick(ADJECTIVES))
        } else {
            let verb = number.form(&self.pick(SAYING_VERBS));
            format!("{verb}, \"{}\"", self.sentence(depth + 1))
        }
    }
}

fn starts_with_vowel(word: &str) -> bool {
    word.starts_with(['a', 'e', 'i', 'o', 'u'])
}

fn capitalise(sentence: &str) -> String {
    let mut chars = sentence.chars();
    match chars.next() {
        Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    //! The generated text is checked by an independent recursive-descent reader of the
    //! grammar, which classifies words by the lexicon and verifies every agreement.
    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    enum Token {
        Word(String),
        Open,
        Close,
        Comma,
        Quote,
        End,
    }

    /// Splits one paragraph into words and punctuation marks.
    fn tokens(paragraph: &str) -> Vec<Token> {
        let mut out = Vec::new();
        let mut word = String::new();
        for c in paragraph.chars() {
            let mark = match c {
                '(' => Some(Token::Open),
                ')' => Some(Token::Close),
                ',' => Some(Token::Comma),
                '"' => Some(Token::Quote),
                '.' | '!' => Some(Token::End),
                ' ' => None,
                c if c.is_ascii_alphabetic() => {
                    word.push(c.to_ascii_lowercase());
                    continue;
                }
                other => panic!("unexpected character {other:?} in {paragraph:?}"),
            };
            if !word.is_empty() {
                out.push(Token::Word(std::mem::take(&mut word)));
            }
            out.extend(mark);
        }
        assert!(word.is_empty(), "paragraph ends inside a word: {paragraph:?}");
        out
    }

    fn number_of(forms: &[Forms], word: &str) -> Option<Number> {
        forms.iter().find_map(|f| {
            if f.0 == word {
                Some(Number::Singular)
            } else if f.1 == word {
                Some(Number::Plural)
            } else {
                None
            }
        })
    }

    /// Reads the paragraph's token stream and counts what it verified.
    struct Reader {
        tokens: Vec<Token>,
        at: usize,
        agreements: usize,
        long_range: usize,
        quotes: usize,
        nested_parentheses: usize,
    }

    impl Reader {
        fn peek(&self) -> Option<&Token> {
            self.tokens.get(self.at)
        }

        fn word(&mut self) -> String {
            match self.tokens.get(self.at) {
                Some(Token::Word(w)) => {
                    self.at += 1;
                    w.clone()
                }
                other => panic!("expected a word at {}, found {other:?}", self.at),
            }
        }

        fn expect(&mut self, token: Token) {
            assert_eq!(self.tokens.get(self.at), Some(&token), "at token {}", self.at);
            self.at += 1;
        }

        /// Determiner [Adjective] Noun: checks `a`/`an` and determiner agreement.
        fn noun_phrase(&mut self, nouns: &[Forms]) -> Number {
            let determiner = self.word();
            let mut next = self.word();
            if ADJECTIVES.contains(&next.as_str()) {
                if determiner == "a" || determiner == "an" {
                    assert_eq!(determiner == "an", starts_with_vowel(&next), "`{determiner} {next}`");
                }
                next = self.word();
            } else if determiner == "a" || determiner == "an" {
                assert_eq!(determiner == "an", starts_with_vowel(&next), "`{determiner} {next}`");
            }
            let number = number_of(nouns, &next).unwrap_or_else(|| panic!("`{next}` is not a noun of the list"));
            let determiner = if determiner == "an" { "a".to_string() } else { determiner };
            assert!(number.determiners().contains(&determiner.as_str()), "`{determiner} {next}` disagree");
            number
        }

        fn any_noun_phrase(&mut self) {
            let all: Vec<Forms> = ANIMATE_NOUNS.iter().chain(THING_NOUNS).copied().collect();
            self.noun_phrase(&all);
        }

        fn verb_agrees(&mut self, verbs: &[Forms], subject: Number) -> String {
            let verb = self.word();
            let number = number_of(verbs, &verb).unwrap_or_else(|| panic!("`{verb}` is not a verb of the list"));
            assert_eq!(number, subject, "`{verb}` does not agree with its subject");
            self.agreements += 1;
            verb
        }

        fn parenthesis(&mut self, level: usize) {
            self.expect(Token::Open);
            if self.peek() == Some(&Token::Word("which".into())) {
                self.at += 1;
                let inner = self.noun_phrase(ANIMATE_NOUNS);
                if self.peek() == Some(&Token::Open) {
                    assert_eq!(level, 0, "parentheses nest at most two deep");
                    self.nested_parentheses += 1;
                    self.parenthesis(level + 1);
                }
                self.verb_agrees(TRANSITIVE_VERBS, inner);
            } else {
                let preposition = self.word();
                assert!(PREPOSITIONS.contains(&preposition.as_str()), "`{preposition}` after `(`");
                self.any_noun_phrase();
            }
            self.expect(Token::Close);
        }

        fn sentence(&mut self, depth: usize) {
            let start = self.at;
            let subject = self.noun_phrase(ANIMATE_NOUNS);
            if self.peek() == Some(&Token::Word("that".into())) {
                self.at += 1;
                let inner = self.noun_phrase(ANIMATE_NOUNS);
                self.verb_agrees(TRANSITIVE_VERBS, inner);
            }
            if let Some(Token::Word(w)) = self.peek() {
                if PREPOSITIONS.contains(&w.as_str()) {
                    self.at += 1;
                    self.any_noun_phrase();
                }
            }
            if self.peek() == Some(&Token::Open) {
                self.parenthesis(0);
            }
            if let Some(Token::Word(w)) = self.peek() {
                if ADVERBS.contains(&w.as_str()) {
                    self.at += 1;
                }
            }
            if self.at - start >= 8 {
                self.long_range += 1;
            }
            let verbs: Vec<Forms> =
                [INTRANSITIVE_VERBS, TRANSITIVE_VERBS, COPULAS, SAYING_VERBS].concat().into_iter().collect();
            let verb = self.verb_agrees(&verbs, subject);
            if number_of(TRANSITIVE_VERBS, &verb).is_some() {
                self.any_noun_phrase();
            } else if number_of(COPULAS, &verb).is_some() {
                let adjective = self.word();
                assert!(ADJECTIVES.contains(&adjective.as_str()), "`{verb} {adjective}`");
            } else if number_of(SAYING_VERBS, &verb).is_some() {
                assert_eq!(depth, 0, "quotations do not nest");
                self.quotes += 1;
                self.expect(Token::Comma);
                self.expect(Token::Quote);
                self.sentence(depth + 1);
                self.expect(Token::Quote);
                return;
            }
            self.expect(Token::End);
        }
    }

    #[test]
    fn same_seed_same_text_and_shorter_is_prefix() {
        let long = generate_text(11, 20_000);
        assert_eq!(long, generate_text(11, 20_000));
        assert!(long.len() >= 20_000);
        assert!(long.starts_with(&generate_text(11, 5_000)));
        assert_ne!(long, generate_text(12, 20_000));
    }

    /// Every subject agrees with its verb, every determiner with its noun, `a`/`an` with the
    /// next word; brackets and quotes match. Many agreements span eight or more tokens.
    #[test]
    fn generated_text_obeys_the_grammar() {
        let text = generate_text(3, 100_000);
        assert!(text.is_ascii());
        let (mut agreements, mut long_range, mut quotes, mut nested, mut sentences) = (0, 0, 0, 0, 0);
        for paragraph in text.lines() {
            let mut reader = Reader {
                tokens: tokens(paragraph),
                at: 0,
                agreements: 0,
                long_range: 0,
                quotes: 0,
                nested_parentheses: 0,
            };
            while reader.at < reader.tokens.len() {
                reader.sentence(0);
                sentences += 1;
            }
            agreements += reader.agreements;
            long_range += reader.long_range;
            quotes += reader.quotes;
            nested += reader.nested_parentheses;
        }
        assert!(sentences > 1000, "{sentences} sentences");
        assert!(agreements > sentences, "{agreements} agreements in {sentences} sentences");
        assert!(long_range * 10 > sentences, "only {long_range} of {sentences} subjects are 8+ tokens from the verb");
        assert!(quotes * 20 > sentences && nested > 10, "{quotes} quotations, {nested} nested parentheses");
        assert_eq!(text.matches('(').count(), text.matches(')').count());
    }
}
